"""The brokers the suite runs against: kproto always, real Apache Kafka when one can run.

Kafka comes from a broker already running at KAFKA_BOOTSTRAP, a local
distribution named by KAFKA_HOME (formatted and started single-node KRaft on
free loopback ports, stopped after the session) or testcontainers' Kafka
module where a Docker engine answers. Without any, `kafka_broker()` returns
the reason and the kafka target is skipped with it.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import pytest

from compat_tests import wire
from broker.launch.process import BrokerProcess, free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Target:
    """One running broker as the scenarios see it."""

    name: str                      # "kproto" or "kafka"
    bootstrap: str
    version: str
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    # True when this broker is the one the recorded observations came from
    # (Kafka 3.9), so its answers must equal them too.
    matches_observations: bool = False

    def supports(self, api: str, version: int | None = None) -> bool:
        rng = self.api_versions.get(wire.API_KEYS[api])
        if rng is None:
            return False
        return version is None or rng[0] <= version <= rng[1]

    def require(self, *apis: str, version: int | None = None) -> None:
        """Skip the calling test when the broker does not advertise one of `apis`.

        Only for features a broker may lack (kproto grows API by API); a test
        never skips for a bug in an API the broker does advertise.
        """
        missing = [a for a in apis if not self.supports(a, version)]
        if missing:
            at = f" at v{version}" if version is not None else ""
            pytest.skip(f"{self.name} does not advertise {', '.join(missing)}{at} in ApiVersions")

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        """Create a topic and wait until its leaders are known.

        CreateTopics when the broker has it; otherwise a 1-partition topic
        without configs is made by Metadata auto-creation, and anything else
        skips the test (the broker cannot make it yet).
        """
        if self.supports("CreateTopics", 7):
            resp = wire.call(self.bootstrap, "CreateTopics", 7, topics=[{
                "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                timeout_ms=15000, validate_only=False)
            err = resp["topics"][0]["error_code"]
            if err not in (0, 36):
                raise AssertionError(f"CreateTopics {name}: {resp['topics'][0]}")
        elif partitions == 1 and not configs:
            wire.call(self.bootstrap, "Metadata", 12, topics=[{"name": name, "topic_id": None}],
                      allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        else:
            self.require("CreateTopics", version=7)
        self.wait_for_topic(name, partitions)

    def wait_for_topic(self, name: str, partitions: int, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            resp = wire.call(self.bootstrap, "Metadata", 12, topics=[{"name": name, "topic_id": None}],
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False)
            topic = resp["topics"][0]
            if (topic["error_code"] == 0 and len(topic["partitions"]) == partitions
                    and all(p["leader_id"] >= 0 for p in topic["partitions"])):
                return topic
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} not ready: {topic}")
            time.sleep(0.1)


# ------------------------------------------------------------------ kproto

def kproto_version() -> str:
    try:
        sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha = ""
    from importlib.metadata import PackageNotFoundError, version
    try:
        ver = version("kproto")
    except PackageNotFoundError:
        ver = "0"
    return f"{ver}+{sha}" if sha else ver


def start_kproto(data_dir: str) -> tuple[BrokerProcess, Target]:
    proc = BrokerProcess(data_dir).start()
    target = Target("kproto", proc.bootstrap, kproto_version(), wire.wait_ready(proc.bootstrap))
    return proc, target


# ------------------------------------------------------------------- kafka

class KafkaHomeBroker:
    """Apache Kafka from a local distribution, single-node KRaft on loopback."""

    def __init__(self, home: str):
        self.home = home
        self.workdir = tempfile.mkdtemp(prefix="compat-kafka-")
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.workdir, "server.out")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def version(self) -> str:
        jars = glob.glob(os.path.join(self.home, "libs", "kafka_*-*.jar"))
        for jar in jars:
            m = re.search(r"kafka_[\d.]+-([\d.]+[^/]*?)\.jar$", jar)
            if m and "test" not in jar and "sources" not in jar:
                return m.group(1)
        return "unknown"

    def _properties(self) -> str:
        # The observed broker's settings (kafka-observations/README.md):
        # the sample KRaft file with the addresses and log.dirs changed.
        return "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={os.path.join(self.workdir, 'data')}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "log.retention.hours=168",
            "log.segment.bytes=1073741824",
            "",
        ])

    def start(self, timeout: float = 120.0) -> Target:
        props = os.path.join(self.workdir, "server.properties")
        with open(props, "w") as f:
            f.write(self._properties())
        env = dict(os.environ, LOG_DIR=os.path.join(self.workdir, "logs"),
                   KAFKA_HEAP_OPTS=os.environ.get("KAFKA_HEAP_OPTS", "-Xmx1G -Xms1G"))
        bin_dir = os.path.join(self.home, "bin")
        subprocess.run([os.path.join(bin_dir, "kafka-storage.sh"), "format", "-t", _kafka_cluster_id(),
                        "-c", props], check=True, capture_output=True, env=env, timeout=120)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([os.path.join(bin_dir, "kafka-server-start.sh"), props],
                                         stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        try:
            apis = wire.wait_ready(self.bootstrap, timeout)
        except wire.WireError:
            self.stop()
            with open(self.log_path) as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"Kafka from {self.home} did not start:\n{tail}")
        version = self.version()
        return Target("kafka", self.bootstrap, version, apis, matches_observations=version.startswith("3.9"))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # kafka-server-start.sh execs java; its process group holds it.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _kafka_cluster_id() -> str:
    import base64
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ContainerBroker:
    """Apache Kafka through testcontainers' Kafka module (KRaft)."""

    IMAGE = os.environ.get("KPROTO_COMPAT_KAFKA_IMAGE", "confluentinc/cp-kafka:7.9.0")
    # Confluent Platform 7.9 ships Apache Kafka 3.9.
    CP_TO_KAFKA = {"7.9": "3.9", "7.8": "3.8", "7.7": "3.7", "7.6": "3.6"}

    def __init__(self):
        from testcontainers.community.kafka import KafkaContainer
        self.container = KafkaContainer(self.IMAGE).with_kraft()

    def start(self) -> Target:
        self.container.start()
        bootstrap = self.container.get_bootstrap_server()
        tag = self.IMAGE.rsplit(":", 1)[-1]
        version = tag
        if "cp-kafka" in self.IMAGE:
            version = self.CP_TO_KAFKA.get(".".join(tag.split(".")[:2]), tag) + f" (cp-kafka {tag})"
        # The image's own broker settings differ from the observed broker's
        # (the sample server.properties), so only the kproto comparison applies.
        return Target("kafka", bootstrap, version, wire.wait_ready(bootstrap))

    def stop(self) -> None:
        self.container.stop()


def docker_engine_reason() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed"
    try:
        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine
        return f"no Docker engine reachable ({type(exc).__name__})"


class RunningBroker:
    """A Kafka broker already running at KAFKA_BOOTSTRAP: used as it is, never started or stopped."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap

    def start(self) -> Target:
        version = os.environ.get("KAFKA_VERSION", "unknown")
        return Target("kafka", self.bootstrap, version, wire.wait_ready(self.bootstrap, 30))

    def stop(self) -> None:
        pass


def kafka_broker():
    """A startable real Kafka, or a string saying why there is none.

    In order: KAFKA_BOOTSTRAP (a broker already running), KAFKA_HOME (a local
    distribution), testcontainers (a Docker engine).
    """
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return RunningBroker(os.environ["KAFKA_BOOTSTRAP"])
    home = os.environ.get("KAFKA_HOME")
    if home:
        if not os.path.exists(os.path.join(home, "bin", "kafka-server-start.sh")):
            return f"KAFKA_HOME={home} has no bin/kafka-server-start.sh"
        return KafkaHomeBroker(home)
    reason = docker_engine_reason()
    if reason is None:
        try:
            return ContainerBroker()
        except ImportError:
            return "testcontainers is not installed"
    return f"no real Kafka: KAFKA_HOME is not set and {reason}"
