"""A transactional consume-transform-produce job (confluent-kafka) on a 3-node
kproto cluster while the job's transaction coordinator is killed with
SIGKILL again and again (then restarted). At the end every input record must
appear exactly once in the read_committed output: no loss, no duplicate, no
aborted read.

    python3 -m tools.txn_failover_loop --kills 5 --records 3000
    python3 -m tools.txn_failover_loop --transaction-version 2    # a cluster formatted with it
    python3 -m tools.txn_failover_loop --kafka ~/.cache/kproto-ref/kafka   # the same on Kafka 3.9

The input arrives in --kills + 1 parts: the first before the job starts, the
next one each time the killed broker is back. Each kill waits until the job
has committed a transaction since its part arrived, so every kill hits a job
that is still copying (a job that has copied all its input commits nothing
more, and waiting for its next commit would wait forever).

The job runs in a child process: when one of its transactional calls blocks
past its timeout (librdkafka 2.16 can, see Job) the process is killed and
started again, and the summary counts these restarts apart.

(tests/test_transactions_failover.py is the short version in CI.)"""
from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import threading
import time

import confluent_kafka
from confluent_kafka.admin import AdminClient

from tests.test_transactions_failover import SETTINGS, coordinator_of, leaders
from tools.cluster_client import QUIET, create_topic, wait_until
from tools.quorum_cluster import QuorumCluster

TXN_ID = "ctp-job"
IN, OUT = "ctp-in", "ctp-out"


def fill(cluster, start: int, end: int) -> None:
    """Input records start..end-1, each on partition number % 3."""
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                  "acks": "all", **QUIET})
    for i in range(start, end):
        p.produce(IN, b"%07d" % i, partition=i % 3)
        if i % 500 == 0:
            p.flush(60)
    assert p.flush(60) == 0


def parts(records: int, n: int) -> list[tuple[int, int]]:
    """records split into n consecutive ranges, as even as they go."""
    bounds = [records * k // n for k in range(n + 1)]
    return list(zip(bounds, bounds[1:]))


# how long past its own timeout a transactional call may block before the job counts as hung
HANG_MARGIN_S = 15.0


class Job:
    """Consume IN, write each value to OUT and commit the offsets in the same transaction.

    Runs in a process of its own (JobProcess): a call of librdkafka 2.16 can block past its own
    timeout when the broker the producer cached as the group's coordinator left the metadata
    (send_offsets_to_transaction waits for it forever: librdkafka issues #5511 and #5456, a client
    bug that real Kafka triggers the same way, since it too leaves fenced brokers out of Metadata).
    Each transactional call posts its deadline in `busy_until` so the parent can see the hang and
    restart the job, as a crashed application is restarted."""

    def __init__(self, bootstrap: str, stop, batch: int, counters: dict):
        self.bootstrap, self.stop, self.batch = bootstrap, stop, batch
        self.counters = counters      # multiprocessing Values: commits, aborts, restarts, busy_until

    def _call(self, timeout: float, fn, *args):
        self.counters["busy_until"].value = time.monotonic() + timeout + HANG_MARGIN_S
        try:
            return fn(*args, timeout)
        finally:
            self.counters["busy_until"].value = 0.0

    def _open(self):
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": "ctp-group", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed", "session.timeout.ms": 10000,
            **QUIET})
        consumer.subscribe([IN])
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap,
                                             "transactional.id": TXN_ID, "transaction.timeout.ms": 20000, **QUIET})
        self._call(120, producer.init_transactions)
        return consumer, producer

    def run(self) -> None:
        consumer = producer = None
        while not self.stop.is_set():
            try:
                if consumer is None:
                    consumer, producer = self._open()
                msgs = [m for m in consumer.consume(self.batch, 1.0) if m.error() is None]
                if not msgs:
                    continue
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(OUT, b"out-" + m.value(), partition=m.partition())
                offsets = {}
                for m in msgs:
                    offsets[(m.topic(), m.partition())] = m.offset() + 1
                self._call(60, producer.send_offsets_to_transaction,
                           [confluent_kafka.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                           consumer.consumer_group_metadata())
                self._call(60, producer.commit_transaction)
                with self.counters["commits"].get_lock():
                    self.counters["commits"].value += 1
            except Exception as exc:   # noqa: BLE001  (any failure: start over from the committed offsets)
                print(f"  job: {exc}; starting over from the committed offsets", flush=True)
                self.counters["restarts"].value += 1
                try:
                    if producer is not None and isinstance(exc, confluent_kafka.KafkaException) \
                            and exc.args[0].txn_requires_abort():
                        self._call(30, producer.abort_transaction)
                        self.counters["aborts"].value += 1
                except Exception:   # noqa: BLE001
                    pass
                if consumer is not None:
                    try:
                        consumer.close()
                    except Exception:   # noqa: BLE001
                        pass
                consumer = producer = None
                time.sleep(1)
        if consumer is not None:
            consumer.close()


def _job_main(bootstrap: str, stop, batch: int, counters: dict) -> None:
    Job(bootstrap, stop, batch, counters).run()


class JobProcess:
    """The job in a child process, restarted (SIGKILL, then a new process that goes on from the
    committed offsets) when one of its transactional calls blocks past its deadline."""

    def __init__(self, bootstrap: str, batch: int):
        self._mp = multiprocessing.get_context("spawn")   # no librdkafka threads inherited
        self.bootstrap, self.batch = bootstrap, batch
        self.counters = {name: self._mp.Value("i", 0) for name in ("commits", "aborts", "restarts")}
        self.counters["busy_until"] = self._mp.Value("d", 0.0)
        self.stop = self._mp.Event()
        self.hangs = 0
        self._proc = None
        self._watching = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, daemon=True)

    @property
    def commits(self) -> int:
        return self.counters["commits"].value

    @property
    def restarts(self) -> int:
        return self.counters["restarts"].value

    def start(self) -> None:
        self._spawn()
        self._watching.set()
        self._watchdog.start()

    def _spawn(self) -> None:
        self.counters["busy_until"].value = 0.0
        self._proc = self._mp.Process(target=_job_main, args=(self.bootstrap, self.stop, self.batch, self.counters),
                                      daemon=True)
        self._proc.start()

    def _watch(self) -> None:
        while self._watching.is_set():
            until = self.counters["busy_until"].value
            if until and time.monotonic() > until:
                self.hangs += 1
                print("  job: a transactional call blocked past its timeout (librdkafka #5511); "
                      "restarting the job process", flush=True)
                self._proc.kill()
                self._proc.join(10)
                self._spawn()
            time.sleep(1)

    def close(self, timeout: float = 120) -> None:
        self._watching.clear()
        self.stop.set()
        if self._proc is not None:
            self._proc.join(timeout)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(10)


class KafkaCluster:
    """Three Kafka KRaft nodes (tools/chaos/cluster.py) behind the calls this tool makes of a
    QuorumCluster, with the same settings: the run to compare with."""

    def __init__(self, kafka_home: str):
        import tempfile
        from tools.chaos.cluster import Cluster
        self.workdir = tempfile.mkdtemp(prefix="txnloop-kafka-")
        self._cluster = Cluster("kafka", 3, self.workdir, use_netns=False, kafka_home=kafka_home,
                                props=SETTINGS, log=lambda *_a: None)
        self.nodes = {n.index + 1: n for n in self._cluster.nodes}   # by node id

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self._cluster.nodes)

    def start(self) -> None:
        self._cluster.start()

    def cleanup(self) -> None:
        import shutil
        self._cluster.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def read_out(cluster, expect: int, timeout: float) -> list[bytes]:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ctp-check",
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, **QUIET})
    c.assign([confluent_kafka.TopicPartition(OUT, i, confluent_kafka.OFFSET_BEGINNING) for i in range(3)])
    seen, deadline, idle = [], time.monotonic() + timeout, 0
    while time.monotonic() < deadline and idle < 10:
        m = c.poll(1.0)
        if m is None or m.error() is not None:
            idle += 1 if len(seen) >= expect else 0
            continue
        idle = 0
        seen.append(m.value())
    c.close()
    return seen


def committed_inputs(cluster) -> int:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ctp-group", **QUIET})
    try:
        offs = c.committed([confluent_kafka.TopicPartition(IN, i) for i in range(3)], timeout=10)
        return sum(max(0, tp.offset) for tp in offs)
    finally:
        c.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--interval", type=float, default=8.0, help="seconds a killed broker stays down")
    ap.add_argument("--batch", type=int, default=20, help="records per transaction")
    ap.add_argument("--logs", help="a directory for the brokers' logs (INFO)")
    ap.add_argument("--transaction-version", type=int, default=0,
                    help="the transaction.version the cluster is formatted with (0-2)")
    ap.add_argument("--kafka", metavar="KAFKA_HOME", help="run on Kafka (3.9) nodes instead of kproto")
    args = ap.parse_args(argv)
    if args.kafka:
        c = KafkaCluster(args.kafka)
    else:
        c = QuorumCluster(3, settings=SETTINGS, log_level="INFO" if args.logs else "WARNING")
        c.format(("--feature", f"transaction.version={args.transaction_version}"))
    c.start()
    started = time.monotonic()
    job = None
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
        for t in (IN, OUT):
            wait_until(lambda: create_topic(admin, t, 3), 60, f"{t} created")
        wait_until(lambda: all(v >= 0 for v in leaders(admin, IN).values()), 30, "leaders")
        chunks = parts(args.records, args.kills + 1)
        fill(c, *chunks[0])
        job = JobProcess(c.bootstrap, args.batch)
        before = job.commits
        job.start()
        for k in range(args.kills):
            fed = chunks[k][1]
            # kill a working job: one that committed since its latest input arrived
            wait_until(lambda: job.commits > before, 180,
                       lambda: f"the job to commit records {chunks[k][0]}..{fed - 1} "
                               f"({committed_inputs(c)} of {fed} input records committed)")
            victim = wait_until(lambda: coordinator_of(admin, TXN_ID), 60, "the job's coordinator")
            print(f"kill {k + 1}: broker {victim} (coordinator of {TXN_ID}); {job.commits} commits so far", flush=True)
            c.nodes[victim].kill()
            time.sleep(args.interval)
            c.nodes[victim].start()
            wait_until(lambda: len(admin.list_topics("__transaction_state", timeout=5)
                                   .topics["__transaction_state"].partitions[0].isrs) == 3, 90, "the ISR whole again")
            before = job.commits
            fill(c, *chunks[k + 1])
        wait_until(lambda: committed_inputs(c) >= args.records, 300, "the job to finish the input")
        job.close()
        seen = read_out(c, args.records, 120)
        counts = collections.Counter(seen)
        dups = {v: n for v, n in counts.items() if n > 1}
        expected = {b"out-%07d" % i for i in range(args.records)}
        missing = expected - set(counts)
        extra = set(counts) - expected
        print(f"{args.kills} coordinator kills, {job.commits} commits, {job.restarts} restarts of the job, "
              f"{job.hangs} restarts of its process after a client hang, "
              f"{len(seen)} records read, {len(dups)} duplicated, {len(missing)} missing, {len(extra)} unexpected, "
              f"{time.monotonic() - started:.0f} s")
        return 0 if not dups and not missing and not extra else 1
    finally:
        if job is not None:
            job.close(10)
        if args.logs and not args.kafka:
            import os
            os.makedirs(args.logs, exist_ok=True)
            for n in c.nodes.values():
                with open(os.path.join(args.logs, f"node{n.node_id}.log"), "w") as f:
                    f.write("".join(n.stderr_lines))
        c.cleanup()


if __name__ == "__main__":
    sys.exit(main())
