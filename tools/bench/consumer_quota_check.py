"""Do the consumer quotas hold as Kafka's do? Two measurements, against kproto
and, when KAFKA_HOME is set, a Kafka 3.9 started the same way:

- consumer_byte_rate: a topic holds more than --seconds at --rate MiB/s; a
  librdkafka consumer whose client id is capped at --rate reads it for
  --seconds; prints bytes delivered / elapsed as a multiple of the quota and
  the throttle times librdkafka's callback saw (Kafka answers an over-quota
  fetch empty, so the multiple stays at or under 1 after the first window);
- request_percentage: a client capped at --percent sends tiny Metadata
  requests one after another; prints how many were answered before the first
  non-zero throttle_time_ms (at most --max-requests).

    python -m tools.bench.consumer_quota_check [--rate 2] [--seconds 10.8] [--percent 1] [--no-kafka]"""
from __future__ import annotations

import argparse
import os
import socket
import struct
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from kproto import api
from kproto.messages.alter_client_quotas_request import AlterClientQuotasRequest as A
from kproto.messages.metadata_request import MetadataRequest
from tools.bench.quota_check import on_kproto_and_kafka

MIB = 1 << 20


def _call(sock, req, version: int, client_id: str, correlation_id: int = 1):
    sock.sendall(api.encode_request(req, version, correlation_id, client_id))
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    data = sock.recv(size, socket.MSG_WAITALL)
    return api.decode_response(data, req.API_KEY, version)[1]


def set_client_quota(bootstrap: str, client_id: str, key: str, value: float) -> None:
    req = A(entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name=client_id)],
                                 ops=[A.OpData(key=key, value=value, remove=False)])], validate_only=False)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        resp = _call(s, req, 1, "quota-check")
    if resp.entries[0].error_code:
        raise RuntimeError(resp.entries[0].error_message)


def fill(bootstrap: str, topic: str, total: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "compression.type": "none"})
    value = os.urandom(16384)
    for _ in range(total // len(value) + 1):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(300)


def consume(bootstrap: str, topic: str, rate_mib: float, seconds: float) -> str:
    set_client_quota(bootstrap, "capped", "consumer_byte_rate", rate_mib * MIB)
    throttles = []
    c = Consumer({"bootstrap.servers": bootstrap, "client.id": "capped", "group.id": "quota-check",
                  "enable.auto.commit": False, "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.monotonic()
    deadline = started + seconds
    while time.monotonic() < deadline:
        msg = c.poll(0.1)
        if msg is not None and msg.error() is None:
            got += len(msg.value())
    elapsed = time.monotonic() - started
    c.close()
    ratio = got / elapsed / (rate_mib * MIB)
    nonzero = [t for t in throttles if t > 0]
    return (f"{got / MIB:7.1f} MiB in {elapsed:.1f} s = {ratio:4.2f} x quota, "
            f"{len(nonzero)} throttled responses, longest {max(nonzero or [0]) * 1000:.0f} ms")


def tiny_requests(bootstrap: str, percent: float, max_requests: int) -> str:
    set_client_quota(bootstrap, "tiny", "request_percentage", percent)
    host, port = bootstrap.rsplit(":", 1)
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        for n in range(1, max_requests + 1):
            resp = _call(s, MetadataRequest(topics=[], allow_auto_topic_creation=False), 12, "tiny", n)
            if resp.throttle_time_ms > 0:
                return (f"first throttle after {n} requests ({time.monotonic() - started:.2f} s), "
                        f"{resp.throttle_time_ms} ms")
    return f"no throttle in {max_requests} requests ({time.monotonic() - started:.2f} s)"


def check(name: str, bootstrap: str, args) -> None:
    topic = "consumer-quota-check"
    fill(bootstrap, topic, int(args.rate * MIB * args.seconds * 1.5))
    print(f"{name:6} consumer_byte_rate {args.rate} MiB/s: {consume(bootstrap, topic, args.rate, args.seconds)}",
          flush=True)
    print(f"{name:6} request_percentage {args.percent}: {tiny_requests(bootstrap, args.percent, args.max_requests)}",
          flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.consumer_quota_check")
    ap.add_argument("--rate", type=float, default=2.0, help="consumer_byte_rate in MiB/s")
    ap.add_argument("--seconds", type=float, default=10.8)
    ap.add_argument("--percent", type=float, default=1.0, help="request_percentage of the tiny-request client")
    ap.add_argument("--max-requests", type=int, default=20000)
    ap.add_argument("--no-kafka", action="store_true")
    on_kproto_and_kafka("consumer-quota-check-", check, ap.parse_args(argv))


if __name__ == "__main__":
    main()
