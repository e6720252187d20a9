"""`kproto cluster`: the broker processes it starts on one machine are one node-group, so each has
`broker.rack` set to the machine (its host name, or --rack), which clients see in Metadata and
which keeps Kafka's rack-aware placement from putting two replicas of a partition on it when the
cluster spans machines."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from kproto.messages.metadata_request import MetadataRequest

from broker.launch.cluster_tool import free_base_port, node_properties
from tests.test_admin_cli import kp
from tests.wire_client import WireClient
from tools.cluster_client import wait_until

pytestmark = pytest.mark.timeout(120)


class _Bootstrap:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap


def test_the_processes_of_a_machine_carry_its_name_as_broker_rack(tmp_path):
    base = free_base_port(1)
    out = open(tmp_path / "out.txt", "w")
    # started with SIGINT ignored, as by a non-interactive shell's `&` (CI runners): Ctrl-C must still
    # stop it; in its own session so that whatever is left can be killed as one group
    proc = subprocess.Popen([sys.executable, "-m", "broker.launch.cli", "cluster", "--nodes", "1",
                             "--dir", str(tmp_path / "c"), "--base-port", str(base)],
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        b = _Bootstrap(f"127.0.0.1:{base}")
        info = wait_until(lambda: (lambda r: r.code == 0 and len(r.json["brokers"]) == 1 and r)(
            kp(b, "cluster", "info", "--format", "json")), 60, "the broker registered").json
        assert [(x["id"], x["rack"]) for x in info["brokers"]] == [(1, socket.gethostname())]   # DescribeCluster
        with WireClient(b.bootstrap) as c:
            md = c.call(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)
        assert [(x.node_id, x.rack) for x in md.brokers] == [(1, socket.gethostname())]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = "still running 40 s after SIGINT"
        out.close()
        assert code == 0
    assert f"broker.rack {socket.gethostname()}" in (tmp_path / "out.txt").read_text()


def test_rack_option():
    def props(i, rack, controllers=None):
        return node_properties(i, 3, controllers, "127.0.0.1", 20092, "/d", {}, rack)
    assert props(1, "m1")["broker.rack"] == "m1"
    assert "broker.rack" not in props(1, "")                       # --rack '': unset
    assert "broker.rack" not in props(1, "m1", controllers=1)      # a controller-only node has no rack
    assert props(2, "m1", controllers=1)["broker.rack"] == "m1"
