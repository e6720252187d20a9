"""Recovery after a power loss, on the power-loss file system
(tools/chaos/lazyfs.py): what a partition log holds after the cut must agree
with its leader-epoch checkpoint. A follower that truncated an old leader's
divergent tail and fetched the new leader's records, then lost power before
those were fsynced, must not come back with the old tail under the new
epoch's start offset: its fetches would then claim the new epoch and the
divergent records would stay in its log for good (and be served if it led).
Skipped (not passed) without FUSE."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from kproto.records import iter_batch_headers
from broker.storage import PartitionLog
from tools.chaos.lazyfs import LazyMount, fuse_available

ok, why = fuse_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"no FUSE here: {why}")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC_ID = uuid.UUID(int=29)

# the replica's side, in a process of its own: it is killed with the power
FOLLOWER = r"""
import os, sys, time, uuid
from kproto.records import build_batch
from broker.storage import PartitionLog
from broker.storage import checkpoints as cp

d = sys.argv[1]
plog = PartitionLog.open(d, None, topic_id=uuid.UUID(int=29), sync=True)
cp.fsync_dir(os.path.dirname(d))      # the partition directory itself is durable

def batch(offset, epoch, value):
    return bytearray(build_batch([(None, value)], base_offset=offset, partition_leader_epoch=epoch))

for i in range(10):                   # the old leader's records (epoch 1), on disk
    plog.append(batch(i, 1, b"old%d" % i), None, now_ms=0, assign_offsets=False)
plog.flush()
plog.truncate_to(5)                   # the new leader (epoch 2) has only 5 of them
for i in range(5, 8):                 # fetched from it; not flushed (Kafka's default flush policy)
    plog.append(batch(i, 2, b"new%d" % i), None, now_ms=0, assign_offsets=False)
print("ready", flush=True)
time.sleep(120)
"""


def _batches(plog):
    data = plog.read_bytes(plog.log_start_offset, 1 << 20)
    return [(h.base_offset, h.partition_leader_epoch) for _pos, h in iter_batch_headers(data)]


def test_a_truncated_divergent_tail_does_not_come_back_under_the_new_epoch(tmp_path):
    disk = LazyMount(str(tmp_path / "disk"), str(tmp_path / "mnt"))
    disk.start()
    d = str(tmp_path / "mnt" / "t-0")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", FOLLOWER, d], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        disk.power_loss()
        disk.start()
        plog = PartitionLog.open(d, None, clean_shutdown=False, topic_id=TOPIC_ID, sync=False)
        try:
            batches = _batches(plog)
            epochs = plog.epochs.entries
        finally:
            plog.close()
        # every batch at or after the start of an epoch carries that epoch or a later one
        wrong = [(off, e, epoch, start) for off, e in batches for epoch, start in epochs
                 if off >= start and e < epoch]
        assert not wrong, f"log {batches} under leader epochs {epochs}: batches of an older epoch " \
                          f"past a newer epoch's start {wrong[:3]}"
        # and nothing below the truncation point was lost: it was flushed before
        assert [off for off, _e in batches][:5] == [0, 1, 2, 3, 4], batches
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if disk.proc is not None:
            disk.stop()
