"""Start `kproto serve` as a real process on a free loopback port, for tests,
benchmarks and the compatibility suite."""
from __future__ import annotations

import os
import signal
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, chosen *below* the kernel's ephemeral range: a port the
    kernel hands out (bind to 0) can be taken, before the broker binds it, as the source
    port of an outgoing connection (another node's fetcher retrying a peer not started
    yet), and the broker then fails with "address already in use" (seen in CI)."""
    low, _high = _ephemeral_range()
    if low > 11000:
        for _ in range(50):
            port = random.randrange(10000, low)
            # a port handed out before is likely still unbound (its broker not started yet):
            # never twice in one process, or two listeners of one node get the same port
            if port in _GIVEN:
                continue
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
                _GIVEN.add(port)
                return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


_GIVEN: set[int] = set()   # the ports free_port() handed out in this process


class BrokerProcess:
    """A kproto broker in its own process. `bootstrap` is host:port."""

    def __init__(self, data_dir: str | None = None, port: int | None = None,
                 settings: dict[str, str] | None = None, log_level: str = "WARNING",
                 metrics: bool = False, new_session: bool = False, open_files_limit: int | None = None,
                 env: dict[str, str] | None = None):
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kproto-")
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.stderr_lines: list[str] = []
        self.ready_line = ""
        # the metrics listener is off unless asked for (then on a free port), so
        # brokers started side by side do not fight over 9644
        self.metrics = metrics
        self.metrics_url: str | None = None
        # its own session, hence its own scheduler autogroup: a broker shares
        # the CPU with the machine's other sessions, not with the clients
        # that drive it (the latency benchmark)
        self.new_session = new_session
        # `ulimit -n` (soft and hard) of the child, and extra environment variables
        self.open_files_limit = open_files_limit
        self.env = dict(env or {})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "broker.launch.cli", "serve", "--log-level", self.log_level,
               "--set", f"log.dirs={self.data_dir}",
               "--set", f"listeners=PLAINTEXT://127.0.0.1:{self.port}"]
        if "kproto.metrics.listener" not in self.settings:
            cmd += ["--set", "kproto.metrics.listener=" + ("http://127.0.0.1:0" if self.metrics else "off")]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        env = dict(os.environ)
        # the folder that holds the `broker` package this module came from (a checkout or
        # site-packages), so the child runs the same code as its parent
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        env.update(self.env)
        preexec = None
        if self.open_files_limit is not None:
            limit = self.open_files_limit

            def preexec():
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, start_new_session=self.new_session,
                                     preexec_fn=preexec)
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("kproto ready"):
                self.ready_line = line.strip()
                words = self.ready_line.split()
                if "metrics" in words:
                    self.metrics_url = words[words.index("metrics") + 1]
                threading.Thread(target=self._drain_stdout, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError(f"broker did not become ready: {line!r}\n" + "".join(self.stderr_lines[-30:]))

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _drain_stdout(self) -> None:
        for _line in self.proc.stdout:
            pass

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """kill -9: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self, clean: bool = True) -> "BrokerProcess":
        if clean:
            self.stop()
        else:
            self.kill()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
