"""Does a producer quota hold? A librdkafka producer whose client id is
capped at --rate MiB/s (producer_byte_rate, set with AlterClientQuotas)
runs for --seconds beside an unthrottled producer; prints both rates (bytes
acknowledged / time until the last acknowledgement) and what librdkafka's
throttle callback saw. Against kproto, and real Kafka when KAFKA_HOME is set.

    python -m tools.bench.quota_check [--rate 1] [--seconds 30] [--no-kafka]"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import tempfile
import threading
import time

from confluent_kafka import Producer

from kproto import api
from kproto.messages.alter_client_quotas_request import AlterClientQuotasRequest as A
from broker.launch.process import BrokerProcess, free_port


def set_quota(bootstrap: str, client_id: str, rate: float) -> None:
    req = A(entries=[A.EntryData(entity=[A.EntityData(entity_type="client-id", entity_name=client_id)],
                                 ops=[A.OpData(key="producer_byte_rate", value=rate, remove=False)])],
            validate_only=False)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(api.encode_request(req, 1, 1, "quota-check"))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
    _cid, resp = api.decode_response(data, A.API_KEY, 1)
    if resp.entries[0].error_code:
        raise RuntimeError(resp.entries[0].error_message)


def produce_for(bootstrap, client_id, topic, seconds, result) -> None:
    throttles, acked = [], [0]
    started = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                  "queue.buffering.max.kbytes": 1024,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    value = os.urandom(16384)

    def done(err, msg):
        if err is None:
            acked[0] += len(msg.value())
    deadline = started + seconds
    while time.monotonic() < deadline:
        try:
            p.produce(topic, value, on_delivery=done)
        except BufferError:
            pass
        p.poll(0.002)
    p.flush(120)
    elapsed = time.monotonic() - started
    result[client_id] = (acked[0] / elapsed / (1 << 20), len([t for t in throttles if t > 0]),
                         max(throttles or [0]))


def check(name: str, bootstrap: str, args) -> None:
    set_quota(bootstrap, "capped", args.rate * (1 << 20))
    time.sleep(1)
    result = {}
    threads = [threading.Thread(target=produce_for, args=(bootstrap, cid, f"quota-{cid}", args.seconds, result))
               for cid in ("capped", "free")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for cid in ("capped", "free"):
        rate, n, worst = result[cid]
        print(f"{name:6} {cid:7} {rate:8.2f} MiB/s  ({rate / args.rate:5.2f} x quota)  "
              f"throttled responses {n}, longest {worst * 1000:.0f} ms", flush=True)


def on_kproto_and_kafka(prefix: str, check, args) -> None:
    """check(name, bootstrap, args) against a kproto broker, then against Kafka where KAFKA_HOME is
    set (and --no-kafka is not), each on a fresh data directory."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        b = BrokerProcess(os.path.join(work, "kproto"))
        b.start()
        try:
            check("kproto", b.bootstrap, args)
        finally:
            b.stop()
        home = os.environ.get("KAFKA_HOME")
        if home and not args.no_kafka:
            from tools.bench.tls_compare import start_kafka
            port = free_port()
            data = os.path.join(work, "kafka")
            os.makedirs(data)
            proc = start_kafka(home, data, {"PLAINTEXT": port},
                               {"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
            try:
                check("kafka", f"127.0.0.1:{port}", args)
            finally:
                proc.terminate()
                proc.wait(60)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.quota_check")
    ap.add_argument("--rate", type=float, default=1.0, help="MiB/s of the capped producer")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--no-kafka", action="store_true")
    on_kproto_and_kafka("quota-check-", check, ap.parse_args(argv))


if __name__ == "__main__":
    main()
