"""Per-node network namespaces joined to one bridge, and the link faults the
nemeses inject on them.

Each node i lives in namespace ``<prefix>n<i>`` with address 10.A.B.(10+i);
its veth pair joins the host-side bridge (10.A.B.1), so clients in the root
namespace reach every node through the bridge and the nodes reach each
other. Faults act on the host-side end of a node's veth:

  isolate   link down: the node hears nothing and nobody hears it
  one-way   traffic towards the node (or from it) is black-holed by a
            token-bucket qdisc with a rate too low to pass anything
  slow      tbf rate limit (and netem delay/jitter where the kernel has it)
  lossy     netem loss, only where the kernel has sch_netem

Only addresses of this machine are used. Everything made is torn down by
close() (and names carry the pid, so runs never collide).
"""
from __future__ import annotations

import os
import shutil
import subprocess


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
    return p


def namespaces_available() -> tuple[bool, str]:
    """Can this process make namespaces and links? (root, iproute2)."""
    if os.geteuid() != 0:
        return False, "not root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"no `{tool}` (iproute2)"
    name = f"kcprobe{os.getpid() % 100000}"
    p = _run("ip", "netns", "add", name, check=False)
    if p.returncode != 0:
        return False, p.stderr.strip() or "ip netns add failed"
    _run("ip", "netns", "del", name, check=False)
    return True, ""


def netem_available() -> bool:
    """Whether `tc qdisc ... netem` works (the kernel may lack sch_netem)."""
    name = f"kcq{os.getpid() % 100000}"
    if _run("ip", "link", "add", name, "type", "dummy", check=False).returncode != 0:
        return False
    try:
        return _run("tc", "qdisc", "add", "dev", name, "root", "netem", "delay", "1ms",
                    check=False).returncode == 0
    finally:
        _run("ip", "link", "del", name, check=False)


class Network:
    def __init__(self, nodes: int):
        pid = os.getpid()
        self.prefix = f"kc{pid % 100000}"
        self.subnet = f"10.{200 + pid % 50}.{(pid // 50) % 250}"
        self.bridge = f"{self.prefix}br"
        self.nodes = nodes
        self.netem = False
        self._made_ns: list[str] = []
        self._made_links: list[str] = []
        self.faults: dict[int, str] = {}

    def ns(self, i: int) -> str:
        return f"{self.prefix}n{i}"

    def host_if(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def node_if(self, i: int) -> str:
        return f"{self.prefix}p{i}"

    def address(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns(i)]

    def setup(self) -> "Network":
        # no forwarding delay: a port brought back up forwards at once
        _run("ip", "link", "add", self.bridge, "type", "bridge", "forward_delay", "0")
        self._made_links.append(self.bridge)
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i in range(self.nodes):
            ns, h, p = self.ns(i), self.host_if(i), self.node_if(i)
            _run("ip", "netns", "add", ns)
            self._made_ns.append(ns)
            _run("ip", "link", "add", h, "type", "veth", "peer", "name", p)
            self._made_links.append(h)
            _run("ip", "link", "set", p, "netns", ns)
            _run("ip", "link", "set", h, "master", self.bridge)
            _run("ip", "link", "set", h, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev", p)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", p, "up")
            _run("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{self.subnet}.1")
        self.netem = netem_available()
        return self

    # ------------------------------------------------------------ faults
    def isolate(self, i: int) -> str:
        _run("ip", "link", "set", self.host_if(i), "down")
        self.faults[i] = "isolate"
        return f"{self.host_if(i)} down"

    def one_way(self, i: int, towards_node: bool) -> str:
        # tbf at 8 bit/s with a one-packet queue: every packet is dropped
        if towards_node:
            dev = ["dev", self.host_if(i)]
            prefix: list[str] = []
        else:
            dev = ["dev", self.node_if(i)]
            prefix = self.exec_prefix(i)
        _run(*prefix, "tc", "qdisc", "replace", *dev, "root", "tbf", "rate", "8bit",
             "burst", "1600", "limit", "1")
        self.faults[i] = "one-way-in" if towards_node else "one-way-out"
        return ("drop all traffic towards the node" if towards_node
                else "drop all traffic from the node")

    def slow(self, i: int, rate: str = "256kbit", delay_ms: int = 50, jitter_ms: int = 20) -> str:
        for prefix, dev in (([], self.host_if(i)), (self.exec_prefix(i), self.node_if(i))):
            if self.netem:
                _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay",
                     f"{delay_ms}ms", f"{jitter_ms}ms", "rate", rate)
            else:
                _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                     "burst", "16kb", "latency", f"{max(delay_ms, 50) * 4}ms")
        self.faults[i] = "slow"
        return (f"netem delay {delay_ms}ms±{jitter_ms}ms rate {rate}" if self.netem
                else f"tbf rate {rate} (no netem in this kernel: no delay/jitter)")

    def lossy(self, i: int, loss_pct: int = 10) -> str:
        if not self.netem:
            raise RuntimeError("lossy links need sch_netem, which this kernel lacks")
        for prefix, dev in (([], self.host_if(i)), (self.exec_prefix(i), self.node_if(i))):
            _run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "loss", f"{loss_pct}%")
        self.faults[i] = "lossy"
        return f"netem loss {loss_pct}%"

    def heal(self, i: int) -> None:
        _run("ip", "link", "set", self.host_if(i), "up", check=False)
        _run("tc", "qdisc", "del", "dev", self.host_if(i), "root", check=False)
        _run(*self.exec_prefix(i), "tc", "qdisc", "del", "dev", self.node_if(i), "root", check=False)
        self.faults.pop(i, None)

    def heal_all(self) -> None:
        for i in range(self.nodes):
            self.heal(i)

    def close(self) -> None:
        for name in reversed(self._made_links):
            _run("ip", "link", "del", name, check=False)
        for ns in reversed(self._made_ns):
            _run("ip", "netns", "del", ns, check=False)
        self._made_links.clear()
        self._made_ns.clear()
