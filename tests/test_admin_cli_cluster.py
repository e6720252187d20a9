"""`kproto cluster health|quorum|info` and `topic describe` against a real 3-node KRaft cluster of
`kproto serve` processes: healthy with every node up (exit 0, three voters); with one node killed,
health names the broker that is down and the under-replicated partitions and exits 4 (for
scripts), and the quorum still has a leader with the dead voter's lag visible."""
from __future__ import annotations

import signal
import time

import pytest

from tests.test_admin_cli import kp, ok
from tools.cluster_client import wait_until
from tools.quorum_cluster import QuorumCluster

pytestmark = pytest.mark.timeout(240)


class _Bootstrap:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


def test_health_and_quorum_of_a_three_node_cluster_with_a_node_down():
    with QuorumCluster(3, settings={"kproto.metrics.listener": "off"}) as c:
        b = _Bootstrap(c.bootstrap)
        wait_until(lambda: len(ok(kp(b, "cluster", "info", "--format", "json")).json["brokers"]) == 3, 60,
                   "3 brokers registered")
        ok(kp(b, "topic", "create", "cli-rf3", "-p", "3", "-r", "3"))
        d = ok(kp(b, "topic", "describe", "cli-rf3", "--format", "json")).json[0]
        assert d["replication_factor"] == 3 and all(sorted(p["replicas"]) == [1, 2, 3] for p in d["partitions"])
        health = wait_until(lambda: (lambda r: r.code == 0 and r)(kp(b, "cluster", "health", "--format", "json")),
                            30, "a healthy cluster").json
        assert health["healthy"] and health["brokers"] == [1, 2, 3] and health["controller_id"] in (1, 2, 3)
        q = ok(kp(b, "cluster", "quorum", "--format", "json")).json
        assert sorted(v["id"] for v in q["voters"]) == [1, 2, 3]
        assert [v["status"] for v in q["voters"] if v["id"] == q["leader_id"]] == ["Leader"]

        # kill a node that is not the quorum leader: the cluster stays up, unhealthy
        victim = next(i for i in (3, 2, 1) if i != q["leader_id"])
        c.nodes[victim].signal(signal.SIGKILL)
        c.nodes[victim].proc.wait()
        alive = ",".join(f"127.0.0.1:{c.ports[i]}" for i in (1, 2, 3) if i != victim)
        b = _Bootstrap(alive)

        def unhealthy():
            r = kp(b, "cluster", "health", "--format", "json")
            return r.code == 4 and victim in r.json["brokers_down"] and r.json["under_replicated_partitions"] and r
        r = wait_until(unhealthy, 60, "health to report the dead broker")
        assert r.json["healthy"] is False and r.json["offline_partitions"] == []
        assert set(r.json["under_replicated_partitions"]) >= {"cli-rf3-0", "cli-rf3-1", "cli-rf3-2"}
        assert r.json["brokers"] == sorted({1, 2, 3} - {victim})
        table = kp(b, "cluster", "health")
        assert table.code == 4 and "under-replicated: " in table.out

        time.sleep(0.5)
        q2 = ok(kp(b, "cluster", "quorum", "--format", "json")).json
        assert q2["leader_id"] in (1, 2, 3) and q2["leader_id"] != victim
        dead = [v for v in q2["voters"] if v["id"] == victim]
        assert dead and dead[0]["status"] == "Follower"
        d = ok(kp(b, "topic", "describe", "cli-rf3", "--format", "json")).json[0]
        assert all(victim not in p["isr"] and p["size_bytes"] is not None for p in d["partitions"])
