"""The chaos suite's network: nodes in their own namespaces, link faults that
really cut or slow them, and a short run with partition and slow nemeses.
Skipped where network namespaces cannot be made (not root, no iproute2)."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest

from tools.chaos.cluster import Cluster, _port_open
from tools.chaos.net import Network, namespaces_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ok, why = namespaces_available()
pytestmark = pytest.mark.skipif(not ok, reason=f"network namespaces not available: {why}")

SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"x" * 65536); c.close()
"""


def wait_open(host: str, port: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _port_open(host, port):
            return True
        time.sleep(0.1)
    return False


def download(host: str, timeout: float = 20.0) -> float:
    t0 = time.monotonic()
    with socket.create_connection((host, 7000), timeout=timeout) as s:
        got = 0
        while got < 65536:
            b = s.recv(65536)
            if not b:
                break
            got += len(b)
    assert got == 65536
    return time.monotonic() - t0


def test_isolate_one_way_and_slow_links_act_on_the_node():
    net = Network(1).setup()
    server = subprocess.Popen(net.exec_prefix(0) + [sys.executable, "-c", SERVER])
    try:
        host = net.address(0)
        assert wait_open(host, 7000)
        fast = download(host)
        assert "tbf" in net.slow(0)
        slow = download(host)
        assert slow > 1.0 > fast, (fast, slow)     # 64 KiB at 256 kbit/s takes ~2 s
        net.heal(0)
        net.isolate(0)
        assert not _port_open(host, 7000)
        net.heal(0)
        net.one_way(0, towards_node=True)
        assert not _port_open(host, 7000)
        net.heal(0)
        assert wait_open(host, 7000)   # may wait out a SYN retransmission
        assert download(host) < 1.0
    finally:
        server.kill()
        server.wait()
        net.close()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert net.ns(0) not in names
    assert subprocess.run(["ip", "link", "show", net.bridge], capture_output=True).returncode != 0


def test_kproto_node_in_a_namespace_is_reachable_only_through_its_link(tmp_path):
    c = Cluster("kproto", 1, str(tmp_path), log=lambda m: None)
    try:
        assert c.mode == "netns"
        c.start()
        node = c.nodes[0]
        assert node.host.startswith("10.") and _port_open(node.host, node.port)
        c.net.isolate(0)
        assert not _port_open(node.host, node.port)
        c.net.heal(0)
        assert wait_open(node.host, node.port)
    finally:
        c.close()


@pytest.mark.long
@pytest.mark.timeout(200)
def test_short_run_with_partitions_and_slow_links(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tools.chaos", "run", "--out", str(tmp_path / "run"), "--time", "12",
                        "--seed", "26", "--nemesis", "partition,slow", "--workload", "queue", "--rate", "60",
                        "--no-plot"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert "cluster up (netns)" in p.stdout
    last = p.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"(\d+) operations, (\d+) faults, 0 anomalies", last)
    assert m and p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert re.search(r"faults\s+\d+\s+\(partition \d+, slow \d+\)", p.stdout), p.stdout[-2000:]
