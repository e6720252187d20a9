"""One consumer-group member process of the groups workload: subscribes,
polls, commits after each batch, records everything in the shared history;
SIGTERM closes it (leaves the group), SIGKILL is a crash."""
from __future__ import annotations

import argparse
import signal
import threading

from confluent_kafka import Consumer

from .history import HistoryWriter
from .workloads import QUIET, poll_once


def main() -> None:
    ap = argparse.ArgumentParser()
    for a in ("--bootstrap", "--topic", "--group", "--history", "--proc"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    h = HistoryWriter(args.history)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    proc, group = args.proc, args.group
    held: set = set()

    def on_assign(_c, parts):
        tps = [[tp.topic, tp.partition] for tp in parts]
        held.update(map(tuple, tps))
        h.write(f="assign", type="ok", proc=proc, group=group, partitions=tps)

    def on_revoke(_c, parts):
        tps = [[tp.topic, tp.partition] for tp in parts]
        held.difference_update(map(tuple, tps))
        h.write(f="revoke", type="ok", proc=proc, group=group, partitions=tps)

    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
                  "heartbeat.interval.ms": 1000, **QUIET})
    c.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    while not stop.is_set():
        poll_once(c, h, proc, "read_uncommitted", group)
    c.close()
    if held:
        h.write(f="revoke", type="ok", proc=proc, group=group, partitions=[list(tp) for tp in sorted(held)])
    h.write(f="leave", type="ok", proc=proc, group=group)
    h.close()


if __name__ == "__main__":
    main()
