"""The same quorum figures for a real Kafka 3.9 cluster on this machine: three
combined-mode (broker,controller) KRaft nodes, Kafka's default timeouts.

- CreateTopics round trip (p50/p99) through a broker;
- kill -9 of the active controller -> the next CreateTopics that succeeds.

    KAFKA_HOME=~/.cache/kproto-ref/kafka python3 -m tools.bench.kafka_quorum --kills 5

Ports 21100-21199 (the raft helper's range); data in a temporary directory.
Every process it starts is stopped by its pid at the end.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

N = 3


def cfg_text(i, base, data, dynamic=False):
    voters = ",".join(f"{j}@127.0.0.1:{base + 10 * j + 1}" for j in range(1, N + 1))
    bootstrap = ",".join(f"127.0.0.1:{base + 10 * j + 1}" for j in range(1, N + 1))
    return "\n".join([
        "process.roles=broker,controller", f"node.id={i}",
        # --dynamic: KIP-853, the controllers named by controller.quorum.bootstrap.servers
        f"controller.quorum.bootstrap.servers={bootstrap}" if dynamic else f"controller.quorum.voters={voters}",
        f"listeners=PLAINTEXT://127.0.0.1:{base + 10 * i},CONTROLLER://127.0.0.1:{base + 10 * i + 1}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{base + 10 * i}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT", f"log.dirs={data}/logs",
        "offsets.topic.replication.factor=3", "num.partitions=1", ""])


class KafkaCluster:
    def __init__(self, home, base, tmp, dynamic=False):
        self.home, self.base, self.tmp = home, base, tmp
        self.dynamic = dynamic
        self.procs = {}

    def bootstrap(self, exclude=()):
        return ",".join(f"127.0.0.1:{self.base + 10 * i}" for i in range(1, N + 1)
                        if i not in exclude)

    def format(self):
        def uuid():
            return subprocess.check_output([f"{self.home}/bin/kafka-storage.sh", "random-uuid"],
                                           text=True).strip()
        cid = uuid()
        extra = []
        if self.dynamic:   # all three voters from the start: --initial-controllers
            extra = ["--initial-controllers", ",".join(f"{j}@127.0.0.1:{self.base + 10 * j + 1}:{uuid()}"
                                                       for j in range(1, N + 1))]
        for i in range(1, N + 1):
            d = os.path.join(self.tmp, f"n{i}")
            os.makedirs(d, exist_ok=True)
            with open(f"{d}/server.properties", "w") as f:
                f.write(cfg_text(i, self.base, d, self.dynamic))
            subprocess.check_call([f"{self.home}/bin/kafka-storage.sh", "format", "-t", cid,
                                   "-c", f"{d}/server.properties", *extra], stdout=subprocess.DEVNULL)

    def start(self, i):
        d = os.path.join(self.tmp, f"n{i}")
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx384m", LOG_DIR=f"{d}/app-logs")
        self.procs[i] = subprocess.Popen(
            [f"{self.home}/bin/kafka-server-start.sh", f"{d}/server.properties"],
            stdout=open(f"{d}/out.log", "ab"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True)

    def kill(self, i):
        p = self.procs.pop(i)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def stop_all(self):
        for i in list(self.procs):
            self.kill(i)

    def leader(self):
        out = subprocess.run([f"{self.home}/bin/kafka-metadata-quorum.sh", "--bootstrap-server",
                              self.bootstrap(), "describe", "--status"],
                             capture_output=True, text=True, timeout=60).stdout
        m = re.search(r"LeaderId:\s+(\d+)", out)
        return int(m.group(1)) if m else None


def create(admin_cls, bootstrap, name, timeout_s):
    from confluent_kafka.admin import NewTopic
    admin = admin_cls({"bootstrap.servers": bootstrap, "socket.timeout.ms": 1000, "log_level": 0})
    fut = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=timeout_s,
                              operation_timeout=timeout_s)[name]
    fut.result()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--creates", type=int, default=100)
    ap.add_argument("--base-port", type=int, default=21100)
    ap.add_argument("--dynamic", action="store_true",
                    help="a dynamic quorum (KIP-853): bootstrap servers, formatted --initial-controllers")
    args = ap.parse_args(argv)
    home = os.environ.get("KAFKA_HOME")
    if not home:
        print("KAFKA_HOME is not set: skipped")
        return 0
    from confluent_kafka.admin import AdminClient
    with tempfile.TemporaryDirectory(prefix="raft-kafka-") as tmp:
        c = KafkaCluster(home, args.base_port, tmp, args.dynamic)
        c.format()
        try:
            for i in range(1, N + 1):
                c.start(i)
            t0 = time.monotonic()
            while True:
                try:
                    create(AdminClient, c.bootstrap(), "warm-up", 5)
                    break
                except Exception:
                    if time.monotonic() - t0 > 180:
                        raise
                    time.sleep(1)
            lat = []
            for k in range(args.creates):
                t = time.monotonic()
                create(AdminClient, c.bootstrap(), f"lat-{k}", 30)
                lat.append((time.monotonic() - t) * 1000)
            print(f"Kafka CreateTopics round trip ({args.creates}): p50 {pct(lat, 50):.1f} ms, "
                  f"p99 {pct(lat, 99):.1f} ms", flush=True)
            fail = []
            for k in range(args.kills):
                victim = c.leader()
                t = time.monotonic()
                c.kill(victim)
                n = 0
                while True:
                    n += 1
                    try:
                        create(AdminClient, c.bootstrap(exclude=(victim,)), f"after-{k}-{n}", 1)
                        break
                    except Exception:
                        if time.monotonic() - t > 120:
                            raise
                fail.append((time.monotonic() - t) * 1000)
                print(f"kill {k + 1}: controller {victim} -> write after {fail[-1]:.0f} ms",
                      flush=True)
                c.start(victim)
                time.sleep(20)  # the JVM starts and catches up
            if fail:
                print(f"Kafka leader kill -> next CreateTopics ({len(fail)} kills): "
                      f"p50 {pct(fail, 50):.0f} ms, max {max(fail):.0f} ms")
        finally:
            c.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
