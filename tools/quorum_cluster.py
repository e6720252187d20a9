"""A KRaft cluster of real `kproto serve` processes on loopback: N nodes (combined
broker,controller by default, or `controllers` voters and the rest broker-only observers), each
with its server.properties, formatted with `kproto storage format` as a Kafka operator would.
Used by tests/test_quorum_cluster.py, tools/bench/quorum_cluster.py and `kproto cluster`."""
from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

from broker.launch.process import BrokerProcess, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class QuorumNode(BrokerProcess):
    def __init__(self, node_id: int, properties: str, data_dir: str, port: int, controller_port: int | None,
                 log_level: str = "WARNING"):
        super().__init__(data_dir=data_dir, port=port, log_level=log_level)
        self.node_id = node_id
        self.properties = properties
        self.controller_port = controller_port

    def command(self) -> list[str]:
        return [sys.executable, "-m", "broker.launch.cli", "serve", "--log-level", self.log_level,
                "--config", self.properties]

    def signal(self, sig) -> None:
        if self.alive():
            self.proc.send_signal(sig)


class QuorumCluster:
    def __init__(self, nodes: int = 3, controllers: int | None = None, base_dir: str | None = None,
                 settings: dict | None = None, log_level: str = "WARNING", host: str = "127.0.0.1",
                 ports: list | None = None, listener: str = "PLAINTEXT",
                 node_settings: dict | None = None):
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="kproto-cluster-")
        self._own_dir = base_dir is None
        self.count = nodes
        self.controllers = nodes if controllers is None else controllers
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.settings = dict(settings or {})
        self.host = host
        ids = list(range(1, nodes + 1))
        ports = list(ports or [])
        take = (lambda: ports.pop(0)) if ports else free_port
        self.ports = {i: take() for i in ids}
        self.controller_ports = {i: take() for i in ids[:self.controllers]}
        self.voters = ",".join(f"{i}@{host}:{p}" for i, p in self.controller_ports.items())
        self.log_level = log_level
        self.listener = listener
        self.node_settings = dict(node_settings or {})
        self.nodes: dict[int, QuorumNode] = {}
        self.roles: dict[int, str] = {}
        for i in ids:
            is_controller = i in self.controller_ports
            combined = is_controller and controllers is None
            self._write_node(i, "broker,controller" if combined else ("controller" if is_controller else "broker"))

    def _write_node(self, i: int, roles: str) -> QuorumNode:
        """Node i's server.properties (and its QuorumNode)."""
        host = self.host
        data = os.path.join(self.base_dir, f"node{i}")
        props = os.path.join(self.base_dir, f"node{i}.properties")
        self.roles[i] = roles
        # self.listener: the broker listener's name (its protocol from listener.security.protocol.map
        # in settings when it is not a protocol's name); self.node_settings: {node id: {key: value}}
        listener = self.listener
        listeners = [] if roles == "controller" else [f"{listener}://{host}:{self.ports[i]}"]
        if i in self.controller_ports:
            listeners.append(f"CONTROLLER://{host}:{self.controller_ports[i]}")
        lines = {"process.roles": roles, "node.id": str(i), "controller.quorum.voters": self.voters,
                 "listeners": ",".join(listeners), "controller.listener.names": "CONTROLLER",
                 "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:PLAINTEXT",
                 "inter.broker.listener.name": listener, "log.dirs": data,
                 "kproto.metrics.listener": "off"}
        if roles == "controller":
            del lines["inter.broker.listener.name"]
        lines.update(self.settings)
        lines.update(self.node_settings.get(i, {}))
        with open(props, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in lines.items()))
        node = self.nodes[i] = QuorumNode(i, props, data, self.ports[i], self.controller_ports.get(i),
                                          self.log_level)
        return node

    def add_broker(self, node_id: int | None = None, settings: dict | None = None,
                   timeout: float = 60.0) -> QuorumNode:
        """A new broker-only node joining the running cluster, as an operator adds one: its own
        server.properties (a new node.id, the same controller.quorum.voters), formatted with the
        cluster's id, started. It registers with the controller and hosts nothing until partitions
        are reassigned to it."""
        node_id = node_id or max(self.nodes) + 1
        self.ports[node_id] = free_port()
        saved = self.settings
        self.settings = {**saved, **(settings or {})}
        try:
            node = self._write_node(node_id, "broker")
        finally:
            self.settings = saved
        self.count += 1
        self._format(node)
        node.start(timeout)
        return node

    @property
    def broker_count(self) -> int:
        return sum("broker" in r for r in self.roles.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{self.host}:{self.ports[i]}" for i in self.nodes if "broker" in self.roles[i])

    def format(self, extra_args: tuple = ()) -> None:
        """`storage format` every node; extra_args, e.g. ("--add-scram", "SCRAM-SHA-256=[...]")."""
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        for n in self.nodes.values():
            self._format(n, env, extra_args)

    def _format(self, n, env=None, extra_args: tuple = ()) -> None:
        if env is None:
            env = dict(os.environ)
            env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", f"--cluster-id={self.cluster_id}",
                            "-c", n.properties, *extra_args], capture_output=True, text=True, env=env)
        if r.returncode:
            raise RuntimeError(f"storage format of node {n.node_id} exited {r.returncode}: "
                               f"{(r.stderr or r.stdout).strip()[-2000:]}")

    def start(self, timeout: float = 60.0) -> "QuorumCluster":
        for n in self.nodes.values():
            n.proc = None
        # all at once: a node is ready once its listeners are bound, the quorum forms meanwhile
        procs = []
        for n in self.nodes.values():
            procs.append(n)
        import threading
        errors = []

        def go(n):
            try:
                n.start(timeout)
            except Exception as exc:   # noqa: BLE001
                errors.append(exc)
        threads = [threading.Thread(target=go, args=(n,)) for n in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        for n in self.nodes.values():
            n.signal(signal.SIGCONT)
            n.kill()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> "QuorumCluster":
        """`with QuorumCluster(...) as c:` formatted and started; stopped and removed on leaving."""
        try:
            self.format()
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc) -> None:
        self.cleanup()
