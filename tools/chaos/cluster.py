"""The nodes of a chaos run: kproto brokers or real Kafka 3.9 brokers (from
KAFKA_HOME), each in its own network namespace (tools/chaos/net.py) or, where
namespaces cannot be made, on loopback (then the network nemeses are off).

``--nodes 1`` runs one single-node kproto (no quorum settings, as
``kproto serve`` starts by default). ``--nodes N`` (N > 1) runs one replicated
KRaft cluster of N combined broker,controller nodes, formatted with one
cluster id like a Kafka cluster (KprotoClusterNode), with replication factor
min(N, 3) and min.insync.replicas 2, as KafkaNode does for Kafka: the whole
cluster is one target (``targets()``) and the nemeses act on single nodes.
"""
from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

from .net import Network, namespaces_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port(host: str = "127.0.0.1") -> int:
    from broker.launch.process import free_port
    return free_port(host)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Node:
    launcher = "broker.launch.cli"   # (kproto nodes; tools.memtrace runs the same CLI under tracemalloc)
    kind = "node"

    def __init__(self, index: int, host: str, port: int, data_dir: str, prefix: list[str],
                 env: dict[str, str]):
        self.index = index
        self.name = f"n{index}"
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.prefix = prefix
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.log_path = os.path.join(os.path.dirname(data_dir), f"{self.name}.log")
        self.starts = 0
        self.extra: dict[str, str] = {}   # --set: properties of a replicated cluster's nodes
        self.log_level = "WARNING"        # (kproto nodes; INFO shows truncations, tools/chaos/scenarios.py)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)

    def start(self, timeout: float = 60.0, wait: bool = True) -> None:
        """Start the process; with wait, until its port answers (a node behind a cut link is
        started with wait=False, and wait_listening() once the link is healed)."""
        env = dict(os.environ)
        env.update(self.env)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_path, "a")
        log.write(f"--- start {self.starts} at {time.time():.3f}\n")
        log.flush()
        self.proc = subprocess.Popen(self.prefix + self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        log.close()
        self.starts += 1
        self.paused = False
        if wait:
            self.wait_listening(timeout)

    def wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} {self.name} exited with {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if _port_open(self.host, self.port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} {self.name} not listening after {timeout}s; see {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            if self.paused:
                os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.paused = False

    def pause(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive() and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.alive():
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class KprotoNode(Node):
    kind = "kproto"

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.launcher, "serve", "--log-level", self.log_level,
                "--set", f"log.dirs={self.data_dir}",
                "--set", f"listeners=PLAINTEXT://{self.host}:{self.port}",
                "--set", "kproto.metrics.listener=off",   # (nodes would fight over port 9644)
                *[a for k, v in self.extra.items() for a in ("--set", f"{k}={v}")]]


def cluster_props(rf: int) -> dict[str, str]:
    """Replication settings shared by the kproto and Kafka clusters of a run
    (Kafka's keys; the internal topics replicated like user topics)."""
    return {"offsets.topic.replication.factor": str(rf), "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(rf, 2)), "transaction.state.log.num.partitions": "4",
            "min.insync.replicas": str(min(rf, 2)), "default.replication.factor": str(rf),
            "group.initial.rebalance.delay.ms": "0", "unclean.leader.election.enable": "false"}


class KprotoClusterNode(Node):
    """A combined broker,controller node of a replicated kproto KRaft cluster:
    its server.properties, formatted with ``kproto storage format`` and the
    cluster's one id (docs/operations.md, "A multi-node KRaft cluster")."""
    kind = "kproto"

    def __init__(self, *a, voters: str, cluster_id: str, controller_port: int, replication: int, **kw):
        super().__init__(*a, **kw)
        self.voters = voters
        self.cluster_id = cluster_id
        self.controller_port = controller_port
        self.replication = replication
        self.config_path = os.path.join(os.path.dirname(self.data_dir), f"{self.name}.properties")

    def prepare(self) -> None:
        super().prepare()
        props = {
            "process.roles": "broker,controller", "node.id": str(self.index + 1),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data_dir, "num.partitions": "1",
            "kproto.metrics.listener": "off",   # (nodes would fight over port 9644 on loopback)
            **cluster_props(self.replication), **self.extra,
        }
        with open(self.config_path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", f"--cluster-id={self.cluster_id}",
                        "-c", self.config_path, "--ignore-formatted"],
                       check=True, capture_output=True, text=True, env=env, cwd=ROOT)

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.launcher, "serve", "--log-level", self.log_level, "--config",
                self.config_path]


class KafkaNode(Node):
    """A combined broker+controller KRaft node of a Kafka distribution."""
    kind = "kafka"

    def __init__(self, *a, kafka_home: str, voters: str, cluster_id: str, controller_port: int,
                 replication: int, **kw):
        super().__init__(*a, **kw)
        self.kafka_home = kafka_home
        self.voters = voters
        self.cluster_id = cluster_id
        self.controller_port = controller_port
        self.replication = replication
        self.config_path = os.path.join(os.path.dirname(self.data_dir), f"{self.name}.properties")

    def prepare(self) -> None:
        super().prepare()
        rf = self.replication
        props = {
            "process.roles": "broker,controller", "node.id": str(self.index + 1),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data_dir, "num.partitions": "1", **cluster_props(rf), **self.extra,
        }
        with open(self.config_path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in props.items())
        subprocess.run([os.path.join(self.kafka_home, "bin", "kafka-storage.sh"), "format", "-t",
                        self.cluster_id, "-c", self.config_path, "--ignore-formatted"],
                       check=True, capture_output=True, text=True)

    def command(self) -> list[str]:
        return [os.path.join(self.kafka_home, "bin", "kafka-server-start.sh"), self.config_path]

    def start(self, timeout: float = 120.0, wait: bool = True) -> None:
        self.env.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m -Xms256m")
        self.env.setdefault("LOG_DIR", os.path.join(os.path.dirname(self.data_dir), f"{self.name}-logs"))
        super().start(timeout, wait)


class Cluster:
    """N nodes of one kind, started, faulted and stopped by the run."""

    def __init__(self, kind: str, nodes: int, workdir: str, *, use_netns: bool = True,
                 disk_mb: int = 0, env: dict[str, str] | None = None, kafka_home: str | None = None,
                 log=print, props: dict[str, str] | None = None, lazyfs: bool = False):
        self.kind = kind
        self.workdir = workdir
        self.log = log
        self.net: Network | None = None
        self.mode = "loopback"
        self.disk_mb = disk_mb
        self._mounts: list[str] = []
        self.lazyfs = lazyfs           # data dirs on LazyFS: the power nemesis (tools/chaos/lazyfs.py)
        self.disks: dict[int, object] = {}
        if use_netns:
            ok, why = namespaces_available()
            if ok:
                self.net = Network(nodes).setup()
                self.mode = "netns"
            else:
                log(f"network namespaces not available ({why}): loopback fallback, "
                    "no partition/slow/lossy nemeses")
        else:
            log("loopback mode: no partition/slow/lossy nemeses")
        env = dict(env or {})
        self.nodes: list[Node] = []
        hosts = [self.net.address(i) if self.net else "127.0.0.1" for i in range(nodes)]
        ports = [9092 if self.net else _free_port() for _ in range(nodes)]
        if kind == "kafka" and not kafka_home:
            raise RuntimeError("--kafka needs KAFKA_HOME (a Kafka 3.9 distribution)")
        self.replicated = kind == "kafka" or nodes > 1
        if self.replicated:
            cports = [9093 if self.net else _free_port() for _ in range(nodes)]
            voters = ",".join(f"{i + 1}@{hosts[i]}:{cports[i]}" for i in range(nodes))
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        for i in range(nodes):
            data = os.path.join(workdir, f"n{i}", "data")
            prefix = self.net.exec_prefix(i) if self.net else []
            if kind == "kafka":
                node = KafkaNode(i, hosts[i], ports[i], data, prefix, dict(env), kafka_home=kafka_home,
                                 voters=voters, cluster_id=cid, controller_port=cports[i],
                                 replication=min(nodes, 3))
            elif self.replicated:
                node = KprotoClusterNode(i, hosts[i], ports[i], data, prefix, dict(env), voters=voters,
                                         cluster_id=cid, controller_port=cports[i], replication=min(nodes, 3))
            else:
                node = KprotoNode(i, hosts[i], ports[i], data, prefix, dict(env))
            node.extra = dict(props or {})
            self.nodes.append(node)

    def start(self) -> None:
        for node in self.nodes:
            os.makedirs(node.data_dir, exist_ok=True)
            if self.disk_mb:
                self._mount_tmpfs(node.data_dir)
            if self.lazyfs:
                from .lazyfs import LazyMount
                disk = LazyMount(os.path.join(os.path.dirname(node.data_dir), "disk"), node.data_dir,
                                 tear=True, seed=node.index * 1000)
                disk.start()
                self.disks[node.index] = disk
            node.prepare()
        if self.replicated:
            # all at once: a node of a multi-voter quorum needs a majority of
            # voters before it serves (a Kafka broker opens its listener only
            # once registered), so starting them one by one would deadlock
            errors: list[Exception] = []

            def go(node):
                try:
                    node.start()
                except Exception as exc:   # noqa: BLE001  (reported below)
                    errors.append(exc)
            threads = [threading.Thread(target=go, args=(n,)) for n in self.nodes]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return
        for node in self.nodes:
            node.start()

    def _mount_tmpfs(self, path: str) -> None:
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m", "tmpfs", path],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"cannot mount a tmpfs for the disk nemesis: {p.stderr.strip()}")
        self._mounts.append(path)

    def targets(self) -> list[list[Node]]:
        """The groups of nodes that form one Kafka cluster each."""
        if self.replicated:
            return [self.nodes]
        return [[n] for n in self.nodes]

    def fill_disk(self, node: Node) -> str:
        path = os.path.join(node.data_dir, ".chaos-filler")
        written = 0
        chunk = b"\0" * (1 << 20)
        with open(path, "wb") as f:
            try:
                while True:
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
            except OSError:
                pass
        return f"filled {node.data_dir} ({written >> 20} MiB filler)"

    def free_disk(self, node: Node) -> None:
        try:
            os.unlink(os.path.join(node.data_dir, ".chaos-filler"))
        except FileNotFoundError:
            pass

    def power_off(self, node: Node) -> dict:
        """Power loss: the process killed, its unsynced writes dropped."""
        node.kill()
        return self.disks[node.index].power_loss()

    def power_on(self, node: Node) -> None:
        disk = self.disks.get(node.index)
        if disk is not None and disk.proc is None:
            disk.start()

    def close(self) -> None:
        for node in self.nodes:
            try:
                node.kill()
            except Exception:
                pass
        for disk in self.disks.values():
            try:
                disk.stop()
            except Exception:
                pass
        for path in reversed(self._mounts):
            subprocess.run(["umount", "-l", path], capture_output=True)
        self._mounts.clear()
        if self.net is not None:
            self.net.close()


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
