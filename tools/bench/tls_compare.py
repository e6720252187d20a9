"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (PLAIN),
kproto beside real Kafka with the same TLS settings when KAFKA_HOME is set.

    python -m tools.bench.tls_compare [--mib 128] [--size 4096] [--rounds 2] [--no-kafka]

Each broker gets all three listeners with one throw-away certificate (EC
P-256, TLS 1.3); librdkafka produces --mib MiB of --size-byte records
(acks=1, linger 5 ms) and a consumer reads them back from offset 0. The
figures are MiB/s of record values; the best of --rounds is printed."""
from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import tempfile
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from broker.launch.process import BrokerProcess, free_port
from tools.certs import Pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="bench" password="bench-pw" user_bench="bench-pw";')
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def listener_settings(ports: dict, server: dict, pki) -> dict:
    return {"listeners": ",".join(f"{p}://127.0.0.1:{port}" for p, port in ports.items()),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": server["combined"],
            "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_path,
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS}


def distinct_ports(names) -> dict:
    ports: dict = {}
    for name in names:
        port = free_port()
        while port in ports.values():   # a just-released port can come back
            port = free_port()
        ports[name] = port
    return ports


def client_conf(protocol: str, port: int, pki) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol}
    if protocol != "PLAINTEXT":
        conf["ssl.ca.location"] = pki.ca_path
    if protocol == "SASL_SSL":
        conf.update({"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-pw"})
    return conf


def run_once(conf: dict, topic: str, mib: int, size: int, acks=1, flush_timeout: float = 300) -> tuple[float, float]:
    """(produce MiB/s, consume MiB/s): mib MiB of size-byte records produced to topic, then consumed
    from offset 0 (also tools/bench/cluster_security.py, with acks=all)."""
    count = mib * (1 << 20) // size
    value = os.urandom(size)
    # batches under Kafka's default message.max.bytes (1048588), or Kafka refuses them
    p = Producer({**conf, "acks": acks, "linger.ms": 5, "batch.size": 512 << 10, "queue.buffering.max.kbytes": 1 << 20,
                  "compression.type": "none"})
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.001)
    assert p.flush(flush_timeout) == 0
    produce_s = time.perf_counter() - started
    c = Consumer({**conf, "group.id": "bench-" + topic, "enable.auto.commit": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        for m in c.consume(1000, 0.2):
            if not m.error():
                got += 1
    consume_s = time.perf_counter() - started
    c.close()
    total = count * size / (1 << 20)
    return total / produce_s, total / consume_s


def measure(name: str, ports: dict, pki, args) -> dict:
    out = {}
    for protocol in PROTOCOLS:
        best = (0.0, 0.0)
        for r in range(args.rounds):
            topic = f"bench-{protocol.lower()}-{r}-{int(time.time())}"
            got = run_once(client_conf(protocol, ports[protocol], pki), topic, args.mib, args.size)
            best = (max(best[0], got[0]), max(best[1], got[1]))
        out[protocol] = best
        print(f"{name:6} {protocol:10} produce {best[0]:8.1f} MiB/s  consume {best[1]:8.1f} MiB/s", flush=True)
    return out


def start_kafka(home: str, data: str, ports: dict, settings: dict) -> subprocess.Popen:
    """A single-node KRaft Kafka from the distribution ``home`` with ``settings`` as
    server.properties lines (``listeners`` names the client listeners; a controller listener is
    added), its log folder and output under ``data``; returns once it says it started."""
    cport = free_port()
    props = {"process.roles": "broker,controller", "node.id": "1",
             "controller.quorum.voters": f"1@127.0.0.1:{cport}", "controller.listener.names": "CONTROLLER",
             "inter.broker.listener.name": "PLAINTEXT", "log.dirs": os.path.join(data, "log"),
             "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
             "transaction.state.log.min.isr": "1", **settings}
    props["listeners"] = settings["listeners"] + f",CONTROLLER://127.0.0.1:{cport}"
    props["advertised.listeners"] = settings["listeners"]
    props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
    path = os.path.join(data, "server.properties")
    with open(path, "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in props.items())
    env = dict(os.environ, KAFKA_HOME=home, LOG_DIR=os.path.join(data, "logs"))
    cluster = "-"
    while cluster.startswith("-"):  # kafka-storage.sh would read "-t -x..." as an option
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    subprocess.run([os.path.join(home, "bin", "kafka-storage.sh"), "format", "-t", cluster, "-c", path],
                   check=True, capture_output=True, env=env, timeout=120)
    log = open(os.path.join(data, "kafka.log"), "w")
    proc = subprocess.Popen([os.path.join(home, "bin", "kafka-server-start.sh"), path],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with open(os.path.join(data, "kafka.log")) as f:
            if "Kafka Server started" in f.read():
                return proc
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("Kafka did not start: see " + os.path.join(data, "kafka.log"))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.tls_compare", description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-kafka", action="store_true")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="tls-compare-")
    pki = Pki(os.path.join(work, "pki"))
    server = pki.pem_files("server", "localhost", server=True)
    try:
        ports = distinct_ports(PROTOCOLS)
        b = BrokerProcess(os.path.join(work, "kproto"), port=ports["PLAINTEXT"],
                          settings=listener_settings(ports, server, pki))
        b.start()
        try:
            measure("kproto", ports, pki, args)
        finally:
            b.stop()
        home = os.environ.get("KAFKA_HOME")
        if home and not args.no_kafka:
            ports = distinct_ports(PROTOCOLS)
            data = os.path.join(work, "kafka")
            os.makedirs(data)
            proc = start_kafka(home, data, ports, listener_settings(ports, server, pki))
            try:
                measure("kafka", ports, pki, args)
            finally:
                proc.terminate()
                proc.wait(60)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
