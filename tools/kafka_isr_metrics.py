"""The scenario of tests/test_metrics_cluster.py against a real 3-node Kafka 3.9 cluster behind
the Prometheus JMX exporter (docs/monitoring/kafka-jmx-exporter.yml): what Kafka's
ReplicaManager, controller and raft metrics say when a follower is killed with kill -9 and
restarted, to compare with kproto's.

    KAFKA_HOME=~/.cache/kproto-ref/kafka python -m tools.kafka_isr_metrics [--base-port 20100]
        [--jmx-agent PATH] [--session-timeout-ms 60000] [--lag-ms 1500]

Needs KAFKA_HOME and the JMX exporter agent jar ($KAFKA_HOME/jmx/jmx_prometheus_javaagent-*.jar
by default). Uses ports base..base+29 (brokers, controllers, exporters). A manual comparison:
not run in CI (three JVMs)."""
from __future__ import annotations

import argparse
import base64
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = os.path.join(ROOT, "docs", "monitoring", "kafka-jmx-exporter.yml")
SHOWN = ("kafka_server_replicamanager_partitioncount", "kafka_server_replicamanager_leadercount",
         "kafka_server_replicamanager_underreplicatedpartitions", "kafka_server_replicamanager_atminisrpartitioncount",
         "kafka_server_replicamanager_underminisrpartitioncount", "kafka_server_replicamanager_isrshrinks_total",
         "kafka_server_replicamanager_isrexpands_total", "kafka_controller_kafkacontroller_activecontrollercount",
         "kafka_controller_kafkacontroller_offlinepartitionscount", "kafka_server_raft_metrics_current_leader",
         "kafka_server_raft_metrics_current_epoch", "kafka_server_raft_metrics_commit_latency_avg")


def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.labels:
                out[s.name] = s.value
    return out


def wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception:   # noqa: BLE001  (a node still starting)
            pass
        time.sleep(0.5)
    raise SystemExit(f"timed out: {what}")


class KafkaNodes:
    def __init__(self, kafka_home: str, agent: str, base: int, workdir: str, extra: dict):
        self.home, self.agent, self.workdir = kafka_home, agent, workdir
        self.ids = [1, 2, 3]
        self.port = {i: base + i for i in self.ids}
        self.cport = {i: base + 10 + i for i in self.ids}
        self.jport = {i: base + 20 + i for i in self.ids}
        voters = ",".join(f"{i}@127.0.0.1:{self.cport[i]}" for i in self.ids)
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        self.procs: dict = {}
        for i in self.ids:
            props = {"process.roles": "broker,controller", "node.id": str(i), "controller.quorum.voters": voters,
                     "listeners": f"PLAINTEXT://127.0.0.1:{self.port[i]},CONTROLLER://127.0.0.1:{self.cport[i]}",
                     "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port[i]}",
                     "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                     "log.dirs": os.path.join(workdir, f"n{i}"), "offsets.topic.replication.factor": "3",
                     **extra}
            with open(self.config(i), "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in props.items())
            subprocess.run([os.path.join(kafka_home, "bin", "kafka-storage.sh"), "format", "-t", cid,
                            "-c", self.config(i)], check=True, capture_output=True)

    def config(self, i: int) -> str:
        return os.path.join(self.workdir, f"n{i}.properties")

    def start(self, i: int) -> None:
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx512m", LOG_DIR=os.path.join(self.workdir, f"n{i}-logs"),
                   KAFKA_OPTS=f"-javaagent:{self.agent}=127.0.0.1:{self.jport[i]}:{RULES}")
        self.procs[i] = subprocess.Popen([os.path.join(self.home, "bin", "kafka-server-start.sh"), self.config(i)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def kill(self, i: int) -> None:
        p = self.procs.get(i)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def stop(self) -> None:
        for i in self.ids:
            self.kill(i)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port[i]}" for i in self.ids)


def show(nodes, phase: str, ids=None) -> None:
    print(f"-- {phase}")
    for i in ids or nodes.ids:
        m = scrape(nodes.jport[i])
        print(f"  node {i}: " + ", ".join(f"{k.split('_', 3)[-1]}={m.get(k, float('nan')):g}" for k in SHOWN))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.kafka_isr_metrics", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-port", type=int, default=20100)
    ap.add_argument("--jmx-agent", default=None)
    ap.add_argument("--session-timeout-ms", default="60000")
    ap.add_argument("--lag-ms", default="1500")
    args = ap.parse_args()
    home = os.environ.get("KAFKA_HOME")
    if not home:
        raise SystemExit("KAFKA_HOME is not set")
    jars = sorted(glob.glob(os.path.join(home, "jmx", "jmx_prometheus_javaagent-*.jar")))
    agent = args.jmx_agent or (jars[-1] if jars else None)
    if not agent:
        raise SystemExit("no JMX exporter agent jar: pass --jmx-agent")
    import confluent_kafka
    from confluent_kafka.admin import AdminClient, NewTopic
    workdir = tempfile.mkdtemp(prefix="kafka-isr-metrics-")
    nodes = KafkaNodes(home, agent, args.base_port, workdir,
                       {"broker.session.timeout.ms": args.session_timeout_ms, "broker.heartbeat.interval.ms": "300",
                        "replica.lag.time.max.ms": args.lag_ms, "replica.fetch.wait.max.ms": "100",
                        "group.initial.rebalance.delay.ms": "0"})
    quiet = {"log_level": 0, "logger": lambda *a, **k: None}
    try:
        for i in nodes.ids:
            nodes.start(i)
        c_id = wait(lambda: next((i for i in nodes.ids if scrape(nodes.jport[i]).get(
            "kafka_controller_kafkacontroller_activecontrollercount") == 1), None), 120, "an active controller")
        leader, victim = [i for i in nodes.ids if i != c_id]
        admin = AdminClient({"bootstrap.servers": nodes.bootstrap, **quiet})
        wait(lambda: len(admin.list_topics(timeout=5).brokers) == 3, 120, "3 brokers registered")
        t = NewTopic("watched", num_partitions=3, config={"min.insync.replicas": "2"},
                     replica_assignment=[[leader, c_id, victim], [c_id, leader, victim], [leader, victim, c_id]])
        admin.create_topics([t])["watched"].result(60)
        wait(lambda: all(scrape(nodes.jport[i]).get("kafka_server_replicamanager_partitioncount") == 3
                         for i in nodes.ids), 60, "3 replicas on every node")
        show(nodes, f"settled (active controller {c_id}, leader of 0 and 2: {leader}, victim {victim})")
        producer = confluent_kafka.Producer({"bootstrap.servers": nodes.bootstrap, "acks": "1", **quiet})

        def produce():
            for p in range(3):
                producer.produce("watched", b"x", partition=p)
            producer.flush(10)
        started = time.monotonic()
        nodes.kill(victim)

        def shrunk():
            produce()
            return scrape(nodes.jport[leader]).get("kafka_server_replicamanager_underreplicatedpartitions") == 2
        wait(shrunk, 120, "under-replicated partitions on the leader")
        show(nodes, f"victim killed with kill -9, shrink seen after {time.monotonic() - started:.1f} s",
             (leader, c_id))
        started = time.monotonic()
        nodes.start(victim)

        def healed():
            produce()
            return all(scrape(nodes.jport[i]).get("kafka_server_replicamanager_underreplicatedpartitions") == 0
                       for i in nodes.ids)
        wait(healed, 180, "nothing under-replicated")
        show(nodes, f"victim restarted, ISR whole again after {time.monotonic() - started:.1f} s")
    finally:
        nodes.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
