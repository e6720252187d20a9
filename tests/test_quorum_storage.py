"""broker/quorum/raft_storage.py: what the quorum shell writes to a node's real metadata files
(quorum-state, __cluster_metadata-0 in Kafka's segment layout, <end>-<epoch>.checkpoint) is what
a restarted node reads back."""
import json
import os
import uuid

from broker.quorum.raft_storage import LogStorage
from broker.storage import LogManager
from raft import messages as m
from raft.node import leader_change_data


def open_log(path):
    lm = LogManager.open(str(path), None)
    return lm, lm.get_or_create("__cluster_metadata", 0, uuid.UUID(int=1), {"segment.bytes": 1 << 30})


def entries(start, epoch, n, control_first=False):
    out = []
    for i in range(n):
        if control_first and i == 0:
            out.append(m.Entry(start, epoch, leader_change_data(1, (1, 2, 3)), control=True))
        else:
            out.append(m.Entry(start + i, epoch, b"record-%d-%d" % (epoch, start + i)))
    return out


def test_the_log_the_vote_and_truncations_survive_a_restart(tmp_path):
    lm, plog = open_log(tmp_path)
    st = LogStorage(plog, voters=(1, 2, 3))
    st.write_quorum_state(m.QuorumState(leader_id=2, leader_epoch=3, voted_id=2))
    st.apply(m.Append(tuple(entries(0, 1, 4, control_first=True))))
    st.apply(m.Append(tuple(entries(4, 2, 3, control_first=True))))
    st.apply(m.Truncate(5))                      # a diverging epoch: 5 and 6 go
    st.apply(m.Append(tuple(entries(5, 3, 2))))
    st.fsync()
    lm.close()

    lm, plog = open_log(tmp_path)
    p = LogStorage(plog, voters=(1, 2, 3)).load()
    assert p.quorum_state == m.QuorumState(leader_id=2, leader_epoch=3, voted_id=2)
    assert [(e.offset, e.epoch, e.control) for e in p.entries] == (
        [(0, 1, True), (1, 1, False), (2, 1, False), (3, 1, False), (4, 2, True), (5, 3, False), (6, 3, False)])
    assert p.entries[5].data == b"record-3-5" and p.entries[0].data == leader_change_data(1, (1, 2, 3))
    assert p.snapshot_id is None
    # Kafka's quorum-state layout (data_version 0, the voters listed)
    doc = json.loads(open(os.path.join(plog.dir, "quorum-state")).read())
    assert doc["leaderEpoch"] == 3 and doc["currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]
    lm.close()


def test_an_installed_snapshot_replaces_the_log_and_comes_back(tmp_path):
    lm, plog = open_log(tmp_path)
    st = LogStorage(plog)
    st.apply(m.Append(tuple(entries(0, 1, 3, control_first=True))))
    sid = m.SnapshotId(10, 2)
    st.apply(m.InstallSnapshot(sid, b"snapshot bytes"))
    st.apply(m.Append(tuple(entries(10, 2, 2))))
    st.fsync()
    lm.close()

    lm, plog = open_log(tmp_path)
    p = LogStorage(plog).load()
    assert p.snapshot_id == sid and p.snapshot_data == b"snapshot bytes"
    assert [e.offset for e in p.entries] == [10, 11]
    assert os.path.exists(os.path.join(plog.dir, "00000000000000000010-0000000002.checkpoint"))
    lm.close()


def test_a_snapshot_taken_later_covers_the_log_before_it(tmp_path):
    lm, plog = open_log(tmp_path)
    st = LogStorage(plog)
    st.apply(m.Append(tuple(entries(0, 1, 6, control_first=True))))
    st.write_snapshot(m.SnapshotId(4, 1), b"state at 4")
    st.fsync()
    lm.close()
    lm, plog = open_log(tmp_path)
    p = LogStorage(plog).load()
    assert p.snapshot_id == m.SnapshotId(4, 1)
    assert [e.offset for e in p.entries] == [4, 5]   # only what follows the snapshot
    lm.close()
