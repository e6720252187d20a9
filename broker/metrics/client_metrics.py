"""Client metrics (KIP-714): subscriptions and the telemetry clients push.

Subscriptions are config resources of type CLIENT_METRICS (ConfigRecords in
the metadata log, set with IncrementalAlterConfigs as kafka-client-metrics.sh
does): `metrics` (metric name prefixes, `*` for all), `interval.ms` (push
interval) and `match` (`selector=regex` pairs on the client's identity).
ClientMetricsManager answers GetTelemetrySubscriptions / PushTelemetry with
the rules of Kafka 3.9's ClientMetricsManager (subscription ids, push
intervals, throttling, termination) and keeps what clients push: counts and
the metric names of each client's latest push (`stats()`), logged at INFO.
"""
from __future__ import annotations

import logging
import re
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field

from kproto import compression
from kproto.errors import ErrorCode, KafkaError

from broker.config.alter import incremental_without_lists
from broker.metrics.subscriptions import CLIENT_METRICS_RESOURCE, has_subscriptions  # noqa: F401

log = logging.getLogger("kproto.client_metrics")

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
ALL_CONFIGS = (METRICS, INTERVAL_MS, MATCH)
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
ALL_SUBSCRIBED_METRICS = "*"
MATCH_SELECTORS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
                   "client_source_address", "client_source_port")
# what Kafka accepts, in its order of preference
ACCEPTED_COMPRESSION = [compression.ZSTD, compression.LZ4, compression.GZIP, compression.SNAPPY]
INSTANCE_CACHE_SIZE = 16384


def _split(value: str | None) -> list[str]:
    return [p.strip() for p in value.split(",")] if value else []


def parse_match(patterns: list[str]) -> dict[str, re.Pattern]:
    """ClientMetricsConfigs.parseMatchingPatterns: `selector=regex` pairs (INVALID_CONFIG
    "Illegal client matching pattern" for anything else, as a Kafka 3.9 answered)."""
    out = {}
    for pattern in patterns:
        pair = pattern.split("=")
        key = pair[0].strip() if len(pair) == 2 else None
        try:
            if key not in MATCH_SELECTORS:
                raise ValueError(pattern)
            out[key] = re.compile(pair[1].strip())
        except (ValueError, re.error):
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}") from None
    return out


def validate(name: str, configs: dict[str, str]) -> None:
    """ClientMetricsConfigs.validate on the resulting set of a subscription."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in ALL_CONFIGS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in configs:
        text = configs[INTERVAL_MS]
        # Kafka parses it with Integer.parseInt and lets the NumberFormatException escape:
        # UNKNOWN_SERVER_ERROR without a message is what a Kafka 3.9 answers
        if not re.fullmatch(r"[+-]?[0-9]+", text or "") or not -(1 << 31) <= int(text) < (1 << 31):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
        interval = int(text)
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for {INTERVAL_MS}, interval "
                             "must be between 100 and 3600000 (1 hour)")
    if MATCH in configs:
        parse_match(_split(configs[MATCH]))


# IncrementalAlterConfigs on these overrides (no key is a LIST)
incremental = incremental_without_lists


@dataclass
class Subscription:
    name: str
    metrics: list[str]
    interval_ms: int
    match: dict[str, re.Pattern]


def subscriptions(image) -> list[Subscription]:
    out = []
    for (rtype, name), configs in sorted(image.configs.items()):
        if rtype != CLIENT_METRICS_RESOURCE or not configs:
            continue
        try:
            interval = int(configs.get(INTERVAL_MS, DEFAULT_INTERVAL_MS))
            match = parse_match(_split(configs.get(MATCH)))
        except (ValueError, KafkaError):
            continue
        out.append(Subscription(name, _split(configs.get(METRICS)), interval, match))
    return out


def resource_names(image) -> list[str]:
    return sorted(name for (rtype, name), configs in image.configs.items()
                  if rtype == CLIENT_METRICS_RESOURCE and configs)


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    subscription_id: int
    metrics: list[str]
    interval_ms: int
    version: int
    client_id: str | None = None
    last_get_ms: int = 0
    last_push_ms: int = 0
    last_error: int = 0
    terminating: bool = False
    pushes: int = 0
    bytes: int = 0
    metric_names: list[str] = field(default_factory=list)


def subscription_id(metrics: list[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    crc = zlib.crc32((",".join(metrics) + str(interval_ms) + str(instance_id)).encode())
    return crc - (1 << 32) if crc >= 1 << 31 else crc


class ClientMetricsManager:
    def __init__(self, image, max_bytes: int, now_ms=lambda: int(time.time() * 1000)):
        self.image = image
        self.max_bytes = max_bytes
        self.now_ms = now_ms
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self.pushes = 0
        self.bytes = 0
        self.throttled = 0
        self.unknown_subscription = 0

    def _version(self) -> tuple:
        # subscriptions as they stand: an instance computed from older ones is recomputed
        return tuple((s.name, tuple(s.metrics), s.interval_ms, tuple(sorted((k, p.pattern) for k, p in s.match.items())))
                     for s in subscriptions(self.image))

    def _instance(self, instance_id: uuid.UUID, client: dict) -> ClientInstance:
        version = hash(self._version())
        inst = self.instances.get(instance_id)
        if inst is not None and inst.version == version:
            self.instances.move_to_end(instance_id)
            return inst
        identity = dict(client, client_instance_id=str(instance_id))
        metrics: list[str] = []
        interval = DEFAULT_INTERVAL_MS
        everything = False
        for s in subscriptions(self.image):
            if all(p.fullmatch(identity.get(k) or "") for k, p in s.match.items()):
                metrics += [m for m in s.metrics if m not in metrics]
                interval = min(interval, s.interval_ms)
                everything = everything or ALL_SUBSCRIBED_METRICS in s.metrics
        if everything:
            metrics = [ALL_SUBSCRIBED_METRICS]
        fresh = ClientInstance(instance_id, subscription_id(metrics, interval, instance_id), metrics, interval,
                               version, client.get("client_id"))
        if inst is not None:   # keep the lifetime counters
            fresh.pushes, fresh.bytes, fresh.metric_names = inst.pushes, inst.bytes, inst.metric_names
            fresh.terminating = inst.terminating
        self.instances[instance_id] = fresh
        self.instances.move_to_end(instance_id)
        while len(self.instances) > INSTANCE_CACHE_SIZE:
            self.instances.popitem(last=False)
        return fresh

    def get_subscriptions(self, instance_id: uuid.UUID, client: dict) -> ClientInstance:
        """The instance's subscription; raises KafkaError(THROTTLING_QUOTA_EXCEEDED) when asked too often."""
        if instance_id.int == 0:
            instance_id = uuid.uuid4()
        inst = self._instance(instance_id, client)
        now = self.now_ms()
        if now - max(inst.last_get_ms, inst.last_push_ms) >= inst.interval_ms or inst.last_get_ms == 0 == inst.last_push_ms:
            inst.last_get_ms = now
        elif inst.last_error not in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE):
            self.throttled += 1
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                             "The request from the client instance has been throttled")
        inst.last_error = 0
        return inst

    def push(self, instance_id: uuid.UUID, sub_id: int, terminating: bool, codec: int, data, client: dict) -> None:
        """Accept one push; raises KafkaError with Kafka's error for a push it refuses."""
        if instance_id.int == 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Invalid request from the client, missing client instance id")
        inst = self._instance(instance_id, client)
        try:
            self._validate_push(inst, sub_id, terminating, codec, data)
        except KafkaError as exc:
            inst.last_error = exc.code
            if exc.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                self.throttled += 1
            elif exc.code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID:
                self.unknown_subscription += 1
            raise
        inst.last_error = 0
        if terminating:
            inst.terminating = True
        payload = bytes(data or b"")
        if codec != compression.NONE and payload:
            try:
                payload = compression.decompress(codec, payload, max_size=max(self.max_bytes * 64, 1 << 20))
            except Exception:
                log.info("client %s pushed telemetry that does not decompress as %s", instance_id,
                         compression.codec_name(codec))
                return
        names = otlp_metric_names(payload)
        inst.pushes += 1
        inst.bytes += len(payload)
        inst.metric_names = names
        self.pushes += 1
        self.bytes += len(payload)
        log.info("client telemetry from %s (client id %s): %d bytes, %d metrics%s", instance_id,
                 client.get("client_id"), len(payload), len(names), ", terminating" if terminating else "")

    def _validate_push(self, inst: ClientInstance, sub_id: int, terminating: bool, codec: int, data) -> None:
        if inst.terminating:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Client {inst.instance_id} sent push telemetry "
                             "request after the termination.")
        now = self.now_ms()
        # right after a GetTelemetrySubscriptions a push is welcome (clients jitter the interval)
        accept = inst.last_get_ms > inst.last_push_ms or now - max(inst.last_get_ms, inst.last_push_ms) >= inst.interval_ms
        if accept:
            inst.last_push_ms = now
        elif not terminating:
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, f"Request from the client "
                             f"[{inst.instance_id}] arrived before the next push interval time")
        if sub_id != inst.subscription_id:
            raise KafkaError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                             f"Unknown client subscription id for the client [{inst.instance_id}]")
        if codec not in ACCEPTED_COMPRESSION and codec != compression.NONE:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Unknown compression type [{codec}] "
                             f"received for the client [{inst.instance_id}]")
        if data is not None and len(data) > self.max_bytes:
            raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE,
                             f"Telemetry data is larger than max bytes [{self.max_bytes}]")

    def stats(self) -> dict:
        return {"pushes": self.pushes, "bytes": self.bytes, "clients": {
            str(i.instance_id): {"client_id": i.client_id, "pushes": i.pushes, "bytes": i.bytes,
                                 "metrics": list(i.metric_names)}
            for i in self.instances.values() if i.pushes}}


# -- OTLP: just enough protobuf to name the metrics of a MetricsData message ---------------------

def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message; values of length-delimited
    fields are bytes. Raises ValueError on malformed input."""
    pos, n = 0, len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        if pos > n:
            raise ValueError("truncated")
        yield number, wire, value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def otlp_metric_names(payload: bytes) -> list[str]:
    """Metric names of an OTLP MetricsData (resource_metrics=1 > scope_metrics=2 > metrics=2 > name=1);
    [] for anything that does not parse."""
    names = []
    try:
        for f1, w1, rm in _fields(payload):
            if f1 != 1 or w1 != 2:
                continue
            for f2, w2, sm in _fields(rm):
                if f2 != 2 or w2 != 2:
                    continue
                for f3, w3, metric in _fields(sm):
                    if f3 != 2 or w3 != 2:
                        continue
                    for f4, w4, name in _fields(metric):
                        if f4 == 1 and w4 == 2:
                            names.append(bytes(name).decode("utf-8", "replace"))
                            break
    except ValueError:
        return []
    return names
