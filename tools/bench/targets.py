"""What the benchmark drives: a kproto broker, an Apache Kafka broker (from
KAFKA_HOME) and the sink ceiling, each a separate process on loopback with
its data in a temporary folder."""
from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from tools.bench import apiversions, procstat
from broker.launch.process import BrokerProcess, free_port

JOIN_GROUP = 11
CREATE_TOPICS = 19
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Target:
    name = ""
    label = ""
    is_broker = True        # broker cost figures apply
    recoverable = True      # has a log to recover after kill -9

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.ready_seconds = None
        self._versions = None

    @property
    def bootstrap(self) -> str:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        raise NotImplementedError

    def start(self, fresh: bool = True) -> float:
        """Start (on a new empty data folder when fresh); seconds from spawn to ready."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def versions(self) -> dict:
        if self._versions is None:
            self._versions = apiversions.supported(self.bootstrap)
        return self._versions

    def supports_groups(self) -> bool:
        return JOIN_GROUP in self.versions()

    def create_topics(self, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
        """Create ``topics`` (name -> partitions), some with topic configs."""
        if CREATE_TOPICS not in self.versions():
            raise RuntimeError(f"{self.label} does not serve CreateTopics")
        configs = configs or {}
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(t, n, 1, config=configs.get(t, {})) for t, n in topics.items()],
                                      operation_timeout=30)
        for f in futures.values():
            f.result(60)

    def cpu_seconds(self) -> float:
        return procstat.cpu_seconds(self.pid)

    def peak_rss(self) -> int | None:
        return procstat.peak_rss_bytes(self.pid)

    def written_bytes(self) -> int | None:
        return procstat.written_bytes(self.pid)


class KprotoTarget(Target):
    name = "kproto"
    label = "kproto"

    def __init__(self, workdir: str, settings: dict[str, str] | None = None, name: str | None = None,
                 label: str | None = None):
        super().__init__(workdir)
        self.proc: BrokerProcess | None = None
        self.port = free_port()
        self.settings = dict(settings or {})  # --set KEY=VALUE for `kproto serve`
        if name:
            self.name = name
        if label:
            self.label = label

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def start(self, fresh: bool = True) -> float:
        data = os.path.join(self.workdir, "data")
        if fresh:
            shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data, exist_ok=True)
        self._versions = None
        self.proc = self._process(data)
        started = time.perf_counter()
        self.proc.start(timeout=600)
        self.ready_seconds = time.perf_counter() - started
        return self.ready_seconds

    def _process(self, data: str) -> BrokerProcess:
        return BrokerProcess(data, self.port, settings=self.settings,
                             new_session=getattr(self, "new_session", False),
                             open_files_limit=getattr(self, "open_files_limit", None))

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def kill(self) -> None:
        if self.proc:
            self.proc.kill()


class _CheckoutProcess(BrokerProcess):
    """`kproto serve` from another checkout (its own PYTHONPATH); a build from
    before broker/launch/ started as `python -m broker.cli`."""

    def __init__(self, checkout: str, *args, **kwargs):
        super().__init__(*args, env={"PYTHONPATH": checkout}, **kwargs)
        self.checkout = checkout

    def command(self) -> list[str]:
        # -P: the bench's working folder (this checkout) must not come before PYTHONPATH
        if os.path.isdir(os.path.join(self.checkout, "broker", "launch")):
            return [sys.executable, "-P"] + super().command()[1:]
        # such a build has no metrics listener (nothing to switch off)
        cmd = [sys.executable, "-P", "-m", "broker.cli", "serve", "--log-level", self.log_level,
               "--set", f"log.dirs={self.data_dir}",
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port}"]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd


class KprotoCheckoutTarget(KprotoTarget):
    """``kproto@PATH``: the broker of another checkout (an older build, for
    example `git archive <commit> | tar -x -C PATH`), driven by the same bench in
    the same run as this one."""

    def __init__(self, workdir: str, checkout: str, settings: dict[str, str] | None = None):
        checkout = os.path.abspath(checkout)
        if not os.path.isdir(os.path.join(checkout, "broker")):
            raise SystemExit(f"kproto@{checkout}: no broker package there")
        super().__init__(workdir, settings, f"kproto@{os.path.basename(checkout.rstrip('/'))}",
                         f"kproto ({checkout})")
        self.checkout = checkout

    def _process(self, data: str) -> BrokerProcess:
        return _CheckoutProcess(self.checkout, data, self.port, settings=self.settings,
                                new_session=getattr(self, "new_session", False),
                                open_files_limit=getattr(self, "open_files_limit", None))


class _VenvProcess(BrokerProcess):
    """`kproto serve` as `pip install` left it in a virtual environment: VENV/bin/kproto, the
    package's bytecode compiled at install, nothing of this checkout on its path."""

    def __init__(self, venv: str, *args, **kwargs):
        super().__init__(*args, env={"PYTHONPATH": ""}, **kwargs)
        self.venv = venv

    def command(self) -> list[str]:
        kproto = os.path.join(self.venv, "bin", "kproto")
        cmd = super().command()[3:]   # (without `python -m broker.launch.cli`)
        lib = os.path.join(self.venv, "lib")
        launch = [d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d, "site-packages", "broker",
                                                                             "launch"))]
        if not launch:   # a build from before broker/launch/ has no metrics listener to set
            at = next(i for i, word in enumerate(cmd) if word.startswith("kproto.metrics.listener="))
            del cmd[at - 1:at + 1]
        return [kproto] + cmd


class KprotoVenvTarget(KprotoTarget):
    """``venv@PATH``: kproto installed in the virtual environment PATH (`python3 -m venv PATH &&
    PATH/bin/pip install <checkout>`), the way a user runs it."""

    def __init__(self, workdir: str, venv: str, settings: dict[str, str] | None = None):
        venv = os.path.abspath(venv)
        if not os.access(os.path.join(venv, "bin", "kproto"), os.X_OK):
            raise SystemExit(f"venv@{venv}: no bin/kproto there (pip install kproto into it)")
        super().__init__(workdir, settings, f"venv@{os.path.basename(venv.rstrip('/'))}", f"kproto ({venv})")
        self.venv = venv

    def _process(self, data: str) -> BrokerProcess:
        return _VenvProcess(self.venv, data, self.port, settings=self.settings,
                            new_session=getattr(self, "new_session", False),
                            open_files_limit=getattr(self, "open_files_limit", None))


class _SubprocessTarget(Target):
    """A target that is one child process listening on a loopback port of its
    own (the sink, a Kafka node)."""

    def __init__(self, workdir: str):
        super().__init__(workdir)
        self.proc: subprocess.Popen | None = None
        self.port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        # for Kafka, java: kafka-server-start.sh execs kafka-run-class.sh, which execs java
        return self.proc.pid

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class SinkTarget(_SubprocessTarget):
    name = "sink"
    label = "sink (ceiling)"
    is_broker = False
    recoverable = False

    def start(self, fresh: bool = True) -> float:
        env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.bench.sink", "--port", str(self.port)],
                                     stdout=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("sink ready"):
            self.kill()
            raise RuntimeError(f"sink did not start: {line!r}")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        self.ready_seconds = time.perf_counter() - started
        return self.ready_seconds

    def create_topics(self, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
        pass  # the sink knows every topic; names carry the partition count

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class KafkaTarget(_SubprocessTarget):
    """Apache Kafka, single node in KRaft mode (broker and controller in one
    process), from the distribution KAFKA_HOME names."""

    name = "kafka"
    label = "Apache Kafka"
    READY = "Kafka Server started"

    def __init__(self, workdir: str, home: str, settings: dict[str, str] | None = None,
                 name: str | None = None, label: str | None = None):
        super().__init__(workdir)
        self.home = home
        self.settings = dict(settings or {})  # extra server.properties lines
        if name:
            self.name = name
        if label:
            self.label = label
        self.controller_port = free_port()
        self.output: list[str] = []
        self.version = _kafka_version(home)

    def _script(self, name: str) -> str:
        return os.path.join(self.home, "bin", name)

    def _env(self) -> dict:
        logs = os.path.join(self.workdir, "logs")
        os.makedirs(logs, exist_ok=True)
        return dict(os.environ, LOG_DIR=logs)

    def _write_properties(self, data: str) -> str:
        path = os.path.join(self.workdir, "server.properties")
        with open(path, "w") as f:
            f.write("\n".join([
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={data}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
            ] + [f"{k}={v}" for k, v in self.settings.items()] + [""]))
        return path

    def start(self, fresh: bool = True) -> float:
        data = os.path.join(self.workdir, "data")
        props = os.path.join(self.workdir, "server.properties")
        if fresh:
            shutil.rmtree(data, ignore_errors=True)
            props = self._write_properties(data)
            cluster = "-"
            while cluster.startswith("-"):  # kafka-storage.sh would read "-t -x..." as an option
                cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            subprocess.run([self._script("kafka-storage.sh"), "format", "-t", cluster, "-c", props],
                           check=True, capture_output=True, env=self._env(), timeout=120)
        self._versions = None
        self.output = []
        started = time.perf_counter()
        self.proc = subprocess.Popen([self._script("kafka-server-start.sh"), props], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=self._env(),
                                     start_new_session=getattr(self, "new_session", False),
                                     preexec_fn=_nofile_limit(getattr(self, "open_files_limit", None)))
        deadline = time.monotonic() + 600
        for line in self.proc.stdout:
            self.output.append(line)
            if self.READY in line:
                self.ready_seconds = time.perf_counter() - started
                threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
                return self.ready_seconds
            if time.monotonic() > deadline:
                break
        self.kill()
        raise RuntimeError("Kafka did not start:\n" + "".join(self.output[-30:]))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.kill()


def _nofile_limit(limit: int | None):
    """A preexec_fn setting the child's `ulimit -n` (None: inherited)."""
    if limit is None:
        return None

    def apply() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return apply


def _kafka_version(home: str) -> str:
    libs = os.path.join(home, "libs")
    try:
        for name in sorted(os.listdir(libs)):
            # kafka_2.13-3.9.0.jar
            if name.startswith("kafka_") and name.endswith(".jar") and "-" in name \
                    and not any(s in name for s in ("-test", "-sources", "-javadoc", "-scaladoc")):
                return name.rsplit("-", 1)[1][:-4]
    except OSError:
        pass
    return "unknown"


# fsync before ack, Kafka's way: flush after every message (topic flush.messages=1)
FSYNC_SETTINGS = {"log.flush.interval.messages": "1"}
TARGET_NAMES = ("kproto", "kproto-fsync", "sink", "kafka", "kafka-fsync", "kproto@PATH")


def make_targets(names: list[str], kafka_home: str | None,
                 broker_settings: dict[str, str] | None = None) -> list[Target]:
    """``broker_settings`` (--broker-set) apply to every broker target; the
    ``-fsync`` variants add log.flush.interval.messages=1."""
    settings = dict(broker_settings or {})
    fsync = settings | FSYNC_SETTINGS
    fsync_label = "log.flush.interval.messages=1"
    out = []
    for name in names:
        workdir = tempfile.mkdtemp(prefix=f"kproto-bench-{name.split('@')[0]}-")
        if name.startswith("kproto@"):
            out.append(KprotoCheckoutTarget(workdir, name.split("@", 1)[1], settings))
        elif name == "kproto":
            out.append(KprotoTarget(workdir, settings))
        elif name == "kproto-fsync":
            out.append(KprotoTarget(workdir, fsync, name, f"kproto-fsync ({fsync_label})"))
        elif name == "sink":
            out.append(SinkTarget(workdir))
        elif name in ("kafka", "kafka-fsync"):
            if not kafka_home:
                raise SystemExit(f"target {name} needs KAFKA_HOME (an Apache Kafka distribution)")
            if name == "kafka":
                out.append(KafkaTarget(workdir, kafka_home, settings))
            else:
                out.append(KafkaTarget(workdir, kafka_home, fsync, name, f"Apache Kafka ({fsync_label})"))
        else:
            raise SystemExit(f"unknown target {name!r} ({', '.join(TARGET_NAMES)})")
    return out
