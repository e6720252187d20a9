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
needs_fuse = pytest.mark.skipif(not ok, reason=f"no FUSE here: {why}")

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


def _on_lazyfs(tmp_path, name: str, script: str):
    """(the mounted power-loss file system, the partition dir on it, the process running `script`
    on that dir): the replica's side, killed with the power."""
    disk = LazyMount(str(tmp_path / "disk"), str(tmp_path / "mnt"))
    disk.start()
    d = str(tmp_path / "mnt" / name)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", script, d], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    return disk, d, proc


def _stop(proc, disk) -> None:
    """The replica's process (if the power loss did not end it) and the file system."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if disk.proc is not None:
        disk.stop()


def _batches(plog):
    data = plog.read_bytes(plog.log_start_offset, 1 << 20)
    return [(h.base_offset, h.partition_leader_epoch) for _pos, h in iter_batch_headers(data)]


@needs_fuse
def test_a_truncated_divergent_tail_does_not_come_back_under_the_new_epoch(tmp_path):
    disk, d, proc = _on_lazyfs(tmp_path, "t-0", FOLLOWER)
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
        _stop(proc, disk)


def test_torn_checkpoints_of_a_partition_do_not_stop_its_recovery(tmp_path):
    # partition.metadata and leader-epoch-checkpoint are renamed into place first and fsynced
    # later by a worker thread; a power loss in between leaves the names with torn contents (seen
    # as a broker that did not start: "leader-epoch-checkpoint: malformed header"). The broker
    # must start anyway: the epochs are rebuilt from the log, the topic id written again.
    from kproto.records import build_batch
    from broker.storage import checkpoints as cp

    d = str(tmp_path / "t-0")
    plog = PartitionLog.open(d, None, topic_id=TOPIC_ID, sync=False)
    for i in range(6):
        plog.append(bytearray(build_batch([(None, b"v%d" % i)], base_offset=i,
                                          partition_leader_epoch=1 if i < 3 else 4)),
                    None, now_ms=0, assign_offsets=False)
    plog.close()
    with open(os.path.join(d, "leader-epoch-checkpoint"), "wb") as f:
        f.write(b"0\n2\n1")
    with open(os.path.join(d, "partition.metadata"), "wb") as f:
        f.write(b"vers")
    plog = PartitionLog.open(d, None, clean_shutdown=False, topic_id=TOPIC_ID, sync=False)
    try:
        assert plog.log_end_offset == 6
        assert plog.epochs.entries == [(1, 0), (4, 3)]
        assert _batches(plog) == [(0, 1), (1, 1), (2, 1), (3, 4), (4, 4), (5, 4)]
    finally:
        plog.close()
    assert cp.read_partition_metadata(os.path.join(d, "partition.metadata")) == TOPIC_ID
    assert cp.read_epoch_checkpoint(os.path.join(d, "leader-epoch-checkpoint")) == [(1, 0), (4, 3)]


# a new partition's first record, flushed as an acks=all answer with flush.messages=1 waits for,
# while the creator's fsyncs of the log dir (the checkpoint writer's thread) have not run yet
NEW_PARTITION = r"""
import sys, time, uuid
from kproto.records import build_batch
from broker.storage import PartitionLog

plog = PartitionLog.open(sys.argv[1], None, topic_id=uuid.UUID(int=29), sync=True,
                         fsync_later=lambda paths: None)   # (a worker thread that is late)
plog.append(bytearray(build_batch([(None, b"acked")], base_offset=0, partition_leader_epoch=0)), None,
            now_ms=0, assign_offsets=False)
targets = plog.flush_targets()                              # the flusher's round (broker/storage/flusher.py)
targets.sync()
plog.flushed(targets)
assert plog.recovery_point == 1
print("ready", flush=True)
time.sleep(120)
"""


@needs_fuse
def test_a_flushed_record_of_a_new_partition_survives_with_its_directory(tmp_path):
    disk, d, proc = _on_lazyfs(tmp_path, "new-0", NEW_PARTITION)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        disk.power_loss()
        disk.start()
        assert os.path.isdir(d), "the partition directory was lost with its flushed record"
        plog = PartitionLog.open(d, None, clean_shutdown=False, topic_id=TOPIC_ID, sync=False)
        try:
            assert plog.log_end_offset == 1
        finally:
            plog.close()
    finally:
        _stop(proc, disk)


def test_a_follower_drops_an_epoch_at_its_log_end_that_the_leader_never_had(tmp_path):
    """The stuck follower of docs/chaos.md: after every node lost power, a follower's checkpoint
    ended with (1, end), written when it was elected in epoch 1 and appended nothing. The new
    leader never had epoch 1 and answers its fetch with the diverging epoch (0, end): nothing to
    cut, but epoch 1 must go, or every fetch asks with it again. No FUSE needed: the state is
    built directly."""
    from types import SimpleNamespace
    from kproto.records import build_batch
    from broker.replication.fetcher import Fetcher

    plog = PartitionLog.open(str(tmp_path / "faults-0"), None, topic_id=TOPIC_ID, sync=False)
    for i in range(3):
        plog.append(bytearray(build_batch([(None, b"v%d" % i)])), 0, now_ms=0)
    plog.assign_epoch(1)                    # elected, then lost the leadership before any append
    part = SimpleNamespace(topic="faults", index=0, log=plog)
    answer = SimpleNamespace(error_code=0, diverging_epoch=SimpleNamespace(epoch=0, end_offset=3))
    rebuilt = []
    follower = SimpleNamespace(_rebuild=rebuilt.append)
    assert Fetcher._apply(follower, part, answer) is False
    assert plog.log_end_offset == 3 and rebuilt == []    # no record cut
    assert plog.latest_epoch == 0                         # the next fetch asks with epoch 0
    plog.close()
