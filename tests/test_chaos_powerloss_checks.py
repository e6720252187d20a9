"""The metadata checks of the power-loss scenarios (tools/chaos/powerloss.py)
on hand-made metadata logs, so that each can be seen failing: two quorum
leaders named for one epoch, two nodes' metadata logs holding different
records at one offset, an acknowledged topic creation missing from a node.
No cluster is started."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("confluent_kafka")

from raft import convert  # noqa: E402
from raft.messages import Entry  # noqa: E402
from tools.chaos.powerloss import META_DIR, PowerLossScenario  # noqa: E402


def _leader(offset, epoch, leader):
    return Entry(offset, epoch, f"{leader}:1,2,3".encode(), control=True)


def _data(offset, epoch, payload):
    return Entry(offset, epoch, payload)


def _scenario(tmp_path, logs: dict[int, list]):
    s = PowerLossScenario("power-loss-controller", str(tmp_path / "run"), log=lambda m: None)
    for n in s.cluster.nodes:
        d = os.path.join(n.data_dir, META_DIR)
        os.makedirs(d)
        with open(os.path.join(d, "00000000000000000000.log"), "wb") as f:
            f.write(convert.entries_to_records(logs[n.index]))
    return s


GOOD = [_leader(0, 1, 1), _data(1, 1, b"\x01TopicRecord pl-meta-00000"), _leader(2, 2, 3),
        _data(3, 2, b"\x01TopicRecord pl-meta-00001")]


def test_agreeing_metadata_logs_pass(tmp_path):
    s = _scenario(tmp_path, {0: GOOD, 1: GOOD, 2: GOOD[:3]})     # n2 behind: a prefix agrees
    s.meta_acked = ["pl-meta-00000"]
    assert s.check_metadata() == []
    assert s.quorum_epochs == 2


def test_two_leaders_in_one_epoch_are_reported(tmp_path):
    other = GOOD[:2] + [_leader(2, 2, 2)]                          # epoch 2 led by 2 here, by 3 there
    s = _scenario(tmp_path, {0: GOOD, 1: other, 2: GOOD})
    problems = s.check_metadata()
    assert any("epoch 2: two quorum leaders [2, 3]" in p for p in problems), problems


def test_metadata_logs_that_differ_at_an_offset_are_reported(tmp_path):
    other = GOOD[:3] + [_data(3, 2, b"\x01TopicRecord pl-meta-00009")]
    s = _scenario(tmp_path, {0: GOOD, 1: GOOD, 2: other})
    problems = s.check_metadata()
    assert any("metadata logs of n0 and n2 differ at offsets [3]" in p for p in problems), problems


def test_an_acknowledged_creation_missing_from_a_node_is_reported(tmp_path):
    s = _scenario(tmp_path, {0: GOOD, 1: GOOD, 2: GOOD[:3]})
    s.meta_acked = ["pl-meta-00000", "pl-meta-00001"]
    problems = s.check_metadata()
    assert problems == ["n2: 1 acknowledged topic creations missing from its metadata, e.g. ['pl-meta-00001']"]
