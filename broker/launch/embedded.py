"""Run a kproto broker inside a program or a test.

    from broker.launch.embedded import open_broker

    with open_broker() as b:                  # a thread of this process, a free port
        produce_to(b.bootstrap)               # "127.0.0.1:PORT"

    async with open_trio_broker() as b:       # in the caller's trio run
        ...

    with BrokerSubprocess() as b:             # `kproto serve` as a child process
        ...

Each starts a single-node broker on a free loopback port with a temporary
data directory (removed at stop unless `data_dir` was given), waits until it
is ready, and stops it cleanly (segments closed, checkpoints written). The
metrics listener is off unless `metrics=True` (then on a free port, named by
`metrics_url`), so brokers started side by side do not fight over 9644.
`create_topic(bootstrap, name)` makes a topic without a Kafka client.

Test-friendly default: `group.initial.rebalance.delay.ms=0` (as Kafka's
sample server.properties sets for development), so a consumer group forms
at once instead of after Kafka's 3 s; pass settings to change it.
"""
from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import tempfile
import threading
import time
from typing import Mapping

import trio

from broker.launch.process import BrokerProcess

__all__ = ["EmbeddedBroker", "open_broker", "open_trio_broker", "BrokerSubprocess", "create_topic"]


TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}


def _config(data_dir: str, port: int, settings: Mapping[str, str] | None, metrics: bool):
    from broker.config import BrokerConfig
    values = {"log.dirs": data_dir, "listeners": f"PLAINTEXT://127.0.0.1:{port}",
              "kproto.metrics.listener": "http://127.0.0.1:0" if metrics else "off", **TEST_DEFAULTS}
    values.update(settings or {})
    return BrokerConfig.load(None, values)


class _Handle:
    """What every way of running a broker answers."""
    broker = None
    data_dir: str
    _own_dir = False

    @property
    def bootstrap(self) -> str:
        host, port = self.broker.advertised_address()
        return f"{host}:{port}"

    @property
    def port(self) -> int:
        return self.broker.advertised_address()[1]

    @property
    def metrics_url(self) -> str | None:
        return self.broker.metrics_url

    def _remove_dir(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class EmbeddedBroker(_Handle):
    """A broker running its own trio loop in a background thread of this
    process. `start()` returns once it serves; `stop()` shuts it down."""

    def __init__(self, data_dir: str | None = None, port: int = 0,
                 settings: Mapping[str, str] | None = None, metrics: bool = False):
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kproto-")
        self.config = _config(self.data_dir, port, settings, metrics)
        self.broker = None
        self._thread: threading.Thread | None = None
        self._token = None
        self._scope: trio.CancelScope | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> "EmbeddedBroker":
        from broker.broker import Broker
        self.broker = Broker(self.config)
        self._thread = threading.Thread(target=self._run, name="kproto-broker", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("kproto broker did not become ready in time")
        if self._error is not None:
            raise RuntimeError(f"kproto broker failed to start: {self._error!r}") from self._error
        return self

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 (handed to the starting thread)
            self._error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                await nursery.start(self.broker.run)
                self._started.set()

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread is None:
            return
        if self._scope is not None and self._thread.is_alive():
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout)
        self._thread = None
        self._remove_dir()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def open_broker(data_dir: str | None = None, settings: Mapping[str, str] | None = None,
                metrics: bool = False, port: int = 0):
    """A broker in a background thread for the `with` block; yields an
    EmbeddedBroker (`.bootstrap` is its host:port)."""
    b = EmbeddedBroker(data_dir, port, settings, metrics).start()
    try:
        yield b
    finally:
        b.stop()


class _TrioBroker(_Handle):
    def __init__(self, broker, data_dir: str, own_dir: bool):
        self.broker = broker
        self.data_dir = data_dir
        self._own_dir = own_dir


@contextlib.asynccontextmanager
async def open_trio_broker(data_dir: str | None = None, settings: Mapping[str, str] | None = None,
                           metrics: bool = False, port: int = 0):
    """A broker running as tasks of the caller's trio run for the `async
    with` block."""
    from broker.broker import Broker
    own = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="kproto-")
    handle = _TrioBroker(Broker(_config(data_dir, port, settings, metrics)), data_dir, own)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(handle.broker.run)
            try:
                yield handle
            finally:
                nursery.cancel_scope.cancel()
    finally:
        handle._remove_dir()


class BrokerSubprocess(BrokerProcess):
    """`kproto serve` as a child process on a free port (for programs that
    do not run trio, or tests that want the broker out of their process):
    `start()`/`stop()` or `with`; `.bootstrap`, `.metrics_url`, `.data_dir`;
    `kill()` is kill -9 and `restart()` brings it back on the same port."""

    def __init__(self, data_dir: str | None = None, port: int | None = None,
                 settings: Mapping[str, str] | None = None, metrics: bool = False,
                 log_level: str = "WARNING"):
        super().__init__(data_dir, port, {**TEST_DEFAULTS, **(settings or {})}, log_level, metrics=metrics)
        self._own_dir = data_dir is None

    def __exit__(self, *exc):
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


# -- making topics without a client -----------------------------------------------------------

_SIZE = struct.Struct(">i")
CREATE_TOPICS_VERSION = 5


def create_topic(bootstrap: str, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None,
                 timeout: float = 10.0) -> None:
    """CreateTopics for one topic (replication factor 1); raises on an error
    other than TOPIC_ALREADY_EXISTS."""
    from kproto import api
    from kproto.messages.create_topics_request import CreateTopicsRequest as Req
    req = Req(timeout_ms=int(timeout * 1000), topics=[Req.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[Req.CreatableTopicConfig(name=k, value=str(v)) for k, v in (configs or {}).items()])])
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(api.encode_request(req, CREATE_TOPICS_VERSION, 1, "kproto-embedded"))
        frame = _recv(sock, _SIZE.unpack(_recv(sock, 4))[0])
    _cid, resp = api.decode_response(frame, Req.API_KEY, CREATE_TOPICS_VERSION)
    result = resp.topics[0]
    if result.error_code not in (0, 36):   # NONE, TOPIC_ALREADY_EXISTS
        raise RuntimeError(f"cannot create topic {name}: error {result.error_code} {result.error_message or ''}")
    _wait_for_leader(bootstrap, name, partitions, deadline)


def _wait_for_leader(bootstrap: str, name: str, partitions: int, deadline: float) -> None:
    """Until Metadata shows every partition with a leader (clients produce at once)."""
    from kproto import api
    from kproto.messages.metadata_request import MetadataRequest as M
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        cid = 0
        while True:
            cid += 1
            req = M(topics=[M.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
            sock.sendall(api.encode_request(req, 12, cid, "kproto-embedded"))
            frame = _recv(sock, _SIZE.unpack(_recv(sock, 4))[0])
            t = api.decode_response(frame, M.API_KEY, 12)[1].topics[0]
            if t.error_code == 0 and len(t.partitions) >= partitions and all(p.leader_id >= 0 for p in t.partitions):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leader yet (error {t.error_code})")
            time.sleep(0.02)


def _recv(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)
