"""Faults on the leader of a replicated 3-node kproto KRaft cluster of real
processes (replication factor 3, min.insync.replicas=2), with an idempotent
acks=all producer at full speed and a consumer group: SIGSTOP of the leader
for longer than the broker session, the leader cut off from everybody by the
network (namespaces), the leader killed and restarted behind a cut link (it
cannot register until the link is healed), and a rolling restart (SIGTERM)
of all three nodes.
Each run is checked for what a user sees (tools/chaos/scenarios.py): every
acknowledged value read back exactly once, in order per producer and
partition; nothing read that is later lost; the group reads everything; and
the replicas' log files are identical afterwards (a returning old leader
truncated the tail it had not replicated). Long versions are commands:
`python3 -m tools.chaos.scenarios pause-leader --repeat 20` (docs/chaos.md)."""
from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")

from kproto import records as rec  # noqa: E402
from tools.chaos.net import namespaces_available  # noqa: E402
from tools.chaos.scenarios import TOPIC, Scenario, describe, failover_gaps  # noqa: E402


def _run(tmp_path, kind, **kw):
    s = Scenario(kind, str(tmp_path / kind), hold=kw.pop("hold", 4.0), log=print)
    v = s.run(kw.pop("repeat", 1), time_limit=120)
    text = describe(v)
    print(text)
    if not v["completed"] or v["group_missing"]:
        _print_node_logs(tmp_path / kind)
    return v, text


def _print_node_logs(out) -> None:
    """A failed run's node logs, in the captured output CI keeps (the run's directory does not
    outlive the CI machine): group and coordinator lines, warnings and errors."""
    keep = ("kproto.groups", "coordinator", "level=warning", "level=error", "fenced", "leader")
    for path in sorted(out.glob("nodes/*/*.log")):
        lines = [ln.rstrip() for ln in path.read_text(errors="replace").splitlines()
                 if any(k in ln for k in keep)]
        print(f"--- {path.name}: {len(lines)} lines of interest, the last 60")
        print("\n".join(lines[-60:]))


def _needs_namespaces():
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(f"network namespaces unavailable: {why}")


def _assert_clean(v, text, faults):
    assert v["completed"], text
    assert v["faults"] == faults, text
    # the faults hit a loaded cluster: the run waits for 500 acks before the first fault and 300
    # after each (1000 was not always reached: 968 at load 84, the failover's acks being few)
    assert v["acked"] >= 800, text
    assert not v["anomalies"], text                 # lost, duplicated, reordered, unexpected
    assert not v["group_missing"], text             # the consumer group read every ack
    assert not v["divergent"], text                 # replicas identical, divergent tails truncated
    assert v["valid"], text


@pytest.mark.long
@pytest.mark.timeout(240)
def test_sigstop_of_the_leader_longer_than_the_session(tmp_path):
    v, text = _run(tmp_path, "pause-leader")
    _assert_clean(v, text, 1)


@pytest.mark.timeout(240)
def test_leader_cut_off_by_the_network_then_healed(tmp_path):
    _needs_namespaces()
    v, text = _run(tmp_path, "isolate-leader")
    _assert_clean(v, text, 1)


@pytest.mark.long
@pytest.mark.timeout(240)
def test_leader_killed_and_restarted_behind_a_cut_link_registers_once_healed(tmp_path):
    # the restarted process cannot reach a controller for longer than its old session: its old
    # registration is fenced meanwhile; once the link is healed it registers, catches up and is
    # back in Metadata and in every ISR, and nothing acknowledged is lost
    _needs_namespaces()
    v, text = _run(tmp_path, "restart-isolated")
    _assert_clean(v, text, 1)
    assert len(v["registered"]) == 1, text


@pytest.mark.long
@pytest.mark.timeout(240)
def test_rolling_restart_of_every_broker_under_load(tmp_path):
    v, text = _run(tmp_path, "rolling-restart")
    _assert_clean(v, text, 3)


def _write_log(node, partition, values, base=0):
    import os
    d = os.path.join(node.data_dir, f"{TOPIC}-{partition}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "00000000000000000000.log"), "wb") as f:
        f.write(rec.build_batch([(None, v) for v in values], base_offset=base))


def test_replica_comparison_reports_a_divergent_tail(tmp_path):
    # the check the fault tests rely on fails on a broken input: a replica
    # that kept a tail the others replaced, and one with a hole
    s = Scenario("kill-leader", str(tmp_path / "cmp"), partitions=2, log=lambda m: None)
    try:
        a, b, c = s.cluster.nodes
        for n in (a, b, c):
            _write_log(n, 1, [b"x0", b"x1"])
        _write_log(a, 0, [b"v0", b"v1", b"v2", b"v3"])
        _write_log(b, 0, [b"v0", b"v1", b"v2", b"v3"])
        _write_log(c, 0, [b"v0", b"v1", b"old2"])           # the old leader's unreplicated tail
        problems = s.compare_replicas()
        assert len(problems) == 1 and "faults/0: n2 differs" in problems[0] and "[2]" in problems[0], problems
        _write_log(c, 0, [b"v0", b"v1", b"v2"])             # truncated and caught up (shorter is fine)
        assert s.compare_replicas() == []
    finally:
        s.h.close()
        s.cluster.close()


def test_failover_gap_is_the_longest_silence_on_the_leaders_partitions():
    acks = [0.0, 1.0, 2.0, 2.1, 6.0, 6.1]    # fault at 2.05: acks resume at 6.0
    ops = [{"f": "send", "type": "ok", "partition": 0, "ts": t} for t in acks]
    ops += [{"f": "send", "type": "ok", "partition": 1, "ts": t} for t in (1.5, 2.06, 9.0)]
    assert failover_gaps(ops, [{"start": 2.05, "partitions": [0]}]) == [pytest.approx(3.9)]
    assert failover_gaps(ops, [{"start": 2.05, "partitions": [0, 1]}]) == [pytest.approx(6.94)]
