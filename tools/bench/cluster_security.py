"""Produce / consume throughput of a 3-node kproto cluster (real processes, combined
broker,controller nodes) with replication factor 3, acks=all and min.insync.replicas=2, when every
listener -- clients, inter-broker replication and the controller quorum -- is PLAINTEXT, and when
every one is SASL_SSL (PLAIN, TLS 1.3, EC P-256) with the StandardAuthorizer on and
allow.everyone.if.no.acl.found=false (the brokers are super users, the client has ACLs).

    python -m tools.bench.cluster_security [--mib 64] [--size 4096] [--rounds 1] [--kafka]

--kafka runs the same three server.properties with real Kafka 3.9 (KAFKA_HOME, 512 MiB heap
each) after kproto.

librdkafka produces --mib MiB of --size-byte records to one partition (acks=all, linger 5 ms),
then a consumer reads them from offset 0; MiB/s of record values, best of --rounds."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from tools.bench.tls_compare import run_once
from tools.certs import Pki
from tools.quorum_cluster import QuorumCluster

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = f'{PLAIN} required username="broker" password="broker-pw" user_broker="broker-pw" user_bench="bench-pw";'
COMMON = {"replica.fetch.wait.max.ms": "100", "min.insync.replicas": "2", "default.replication.factor": "3",
          "offsets.topic.replication.factor": "3"}


def secure_settings(pki) -> dict:
    server = pki.pem_files("node", "kproto-node", server=True)
    return {"listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": server["combined"],
            "ssl.truststore.type": "PEM", "ssl.truststore.location": pki.ca_path,
            "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "listener.name.controller.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false", "super.users": "User:broker"}


def client_conf(cluster, protocol, pki, user="bench") -> dict:
    conf = {"bootstrap.servers": cluster.bootstrap, "log_level": 0}
    if protocol == "SASL_SSL":
        conf.update({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": user,
                     "sasl.password": f"{user}-pw", "ssl.ca.location": pki.ca_path})
    return conf


def _retry(fn, seconds=60):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return fn()
        except Exception:   # noqa: BLE001 (the quorum may still be electing)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def prepare(cluster, protocol, pki, topic) -> None:
    admin = AdminClient(client_conf(cluster, protocol, pki, "broker"))
    _retry(lambda: admin.create_topics([NewTopic(topic, 1, 3)], request_timeout=20)[topic].result(30))
    if protocol == "SASL_SSL":
        acls = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bench", "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ,
                                                                AclOperation.DESCRIBE)]
        for fut in admin.create_acls(acls, request_timeout=20).values():
            fut.result(30)

    def isr3():
        md = admin.list_topics(topic, timeout=10)
        assert len(md.topics[topic].partitions[0].isrs) == 3
    _retry(isr3)


class KafkaNodes:
    """The cluster's server.properties run by Kafka 3.9 instead of kproto."""

    def __init__(self, cluster, home):
        self.cluster, self.home, self.procs = cluster, home, {}

    def format(self):
        for n in self.cluster.nodes.values():
            subprocess.run([f"{self.home}/bin/kafka-storage.sh", "format", "-t", self.cluster.cluster_id,
                            "-c", n.properties], check=True, capture_output=True)

    def start(self, timeout):
        for i, n in self.cluster.nodes.items():
            out = open(n.properties + ".log", "w")
            env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx512m", LOG_DIR=n.data_dir + "-logs")
            self.procs[i] = subprocess.Popen([f"{self.home}/bin/kafka-server-start.sh", n.properties],
                                             stdout=out, stderr=subprocess.STDOUT, env=env,
                                             start_new_session=True)
        deadline = time.monotonic() + timeout
        for n in self.cluster.nodes.values():
            while "Kafka Server started" not in open(n.properties + ".log").read():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kafka did not start: see {n.properties}.log")
                time.sleep(1)

    def stop(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def measure(protocol: str, args, work: str, kafka_home: str | None = None) -> tuple[float, float]:
    pki = Pki(os.path.join(work, "pki"))
    settings = dict(COMMON)
    if protocol == "SASL_SSL":
        settings.update(secure_settings(pki))
    name = ("kafka-" if kafka_home else "") + protocol.lower()
    os.makedirs(os.path.join(work, name), exist_ok=True)
    cluster = QuorumCluster(3, base_dir=os.path.join(work, name), settings=settings, listener=protocol)
    runner = KafkaNodes(cluster, kafka_home) if kafka_home else cluster
    try:
        runner.format()
        runner.start(timeout=300 if kafka_home else 120)
        best = (0.0, 0.0)
        for r in range(args.rounds):
            topic = f"bench-{r}"
            prepare(cluster, protocol, pki, topic)
            got = run_once(client_conf(cluster, protocol, pki), topic, args.mib, args.size, acks="all",
                           flush_timeout=600)
            best = (max(best[0], got[0]), max(best[1], got[1]))
        print(f"{'kafka' if kafka_home else 'kproto':6} 3 nodes RF=3 acks=all {protocol:10} produce "
              f"{best[0]:7.1f} MiB/s  consume {best[1]:7.1f} MiB/s", flush=True)
        return best
    finally:
        runner.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.cluster_security", description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--protocols", default="PLAINTEXT,SASL_SSL")
    ap.add_argument("--kafka", action="store_true", help="also real Kafka (KAFKA_HOME)")
    ap.add_argument("--only-kafka", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="cluster-security-")
    try:
        home = os.environ.get("KAFKA_HOME")
        if (args.kafka or args.only_kafka) and not home:
            raise SystemExit("--kafka needs KAFKA_HOME")
        for protocol in args.protocols.split(","):
            if not args.only_kafka:
                measure(protocol.strip().upper(), args, work)
            if args.kafka or args.only_kafka:
                measure(protocol.strip().upper(), args, work, home)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
