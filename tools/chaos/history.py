"""The history of a chaos run: one JSON object per line, appended by every
client thread and member process of the run (and by the nemesis).

Every operation has ``ts`` (wall-clock seconds, so separate processes share
one time base), ``proc`` (who did it), ``f`` (what) and ``type``: ``invoke``
when it starts, then ``ok`` (it happened), ``fail`` (it certainly did not) or
``info`` (unknown: a timeout or a lost connection). The kinds of ``f``:

  send     topic, partition, value; ok adds offset          (producers)
  poll     records: [[topic, partition, offset, value], ...], isolation
  assign   partitions: [[topic, partition], ...]; revoke the same
  commit   group, offsets: [[topic, partition, offset], ...]
  txn      txn, outcome (commit|abort), writes: [[topic, value]],
           reads: [[topic, partition, offset, value]]       (the copier)
  crash    a group member was killed
  nemesis  type start|stop, kind, node, detail
  final    end_offsets {"topic/partition": offset}, committed {group: {...}}
  run      type start|stop; stop has completed true|false

Lines are written with one os.write on an O_APPEND descriptor each, so
several processes can share the file without interleaving lines.
"""
from __future__ import annotations

import json
import os
import threading
import time


class HistoryWriter:
    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()
        self.count = 0
        self.counts: dict[str, int] = {}

    def write(self, **op) -> dict:
        op.setdefault("ts", time.time())
        line = (json.dumps(op, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return op
            os.write(self._fd, line)
            self.count += 1
            key = f"{op.get('f')}:{op.get('type')}"
            self.counts[key] = self.counts.get(key, 0) + 1
        return op

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_history(path: str) -> list[dict]:
    """All operations of a history file in time order (a torn last line, left
    by a killed writer, is skipped)."""
    ops = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                ops.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    ops.sort(key=lambda o: o.get("ts", 0.0))
    return ops


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"
