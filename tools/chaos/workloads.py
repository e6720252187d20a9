"""Workloads: real Kafka clients (confluent-kafka / librdkafka) that record
every send, acknowledgement, error and poll in the history.

  queue    idempotent acks=all producers writing unique values round-robin
           to the partitions of a topic; a consumer that assigns every
           partition and one that subscribes in a group and commits
  copier   consume-transform-produce in transactions (read_committed),
           some deliberately aborted; readers of its output
  groups   member processes (tools/chaos/member.py) joining, leaving and
           being killed while they consume and commit (see GroupChurn)

Every workload instance talks to one target (one Kafka cluster); its topic
names carry the target's name.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .history import HistoryWriter, tp_key

QUIET = {"log_level": 0, "error_cb": lambda err: None,
         # librdkafka 2.16's default, "rebootstrap", decommissions the only
         # broker when it is unreachable; a transactional producer's cached
         # group coordinator then stays that dead handle and
         # send_offsets_to_transaction() hangs past its own timeout after the
         # broker is back (against Kafka 3.9 as well; docs/chaos.md). "none"
         # keeps the suite measuring the broker; --rebootstrap restores it.
         "metadata.recovery.strategy": os.environ.get("CHAOS_METADATA_RECOVERY", "none")}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _err_name(err) -> str:
    if isinstance(err, KafkaException):
        err = err.args[0]
    if isinstance(err, KafkaError):
        return err.name()
    return type(err).__name__


def create_topics(bootstrap: str, topics: dict[str, int], replication: int, deadline_s: float = 60) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    deadline = time.monotonic() + deadline_s
    pending = dict(topics)
    while pending:
        futs = admin.create_topics([NewTopic(t, n, replication) for t, n in pending.items()],
                                   operation_timeout=10, request_timeout=15)
        for t, fut in futs.items():
            try:
                fut.result()
                pending.pop(t)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    pending.pop(t)
                elif time.monotonic() > deadline:
                    raise
        if pending:
            time.sleep(0.5)


class ProducerLoop:
    """One idempotent acks=all producer writing unique values."""

    def __init__(self, h: HistoryWriter, bootstrap: str, proc: str, topic: str, partitions: int,
                 rate: float, stop: threading.Event):
        self.h, self.bootstrap, self.base, self.topic = h, bootstrap, proc, topic
        self.partitions, self.rate, self.stop = partitions, rate, stop
        self.outstanding = 0
        self.gen = 0
        self.thread = threading.Thread(target=self.run, name=proc, daemon=True)

    def _producer(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 30000, "request.timeout.ms": 10000,
                         **QUIET})

    def run(self) -> None:
        self.prod = self._producer()
        self.proc = f"{self.base}.{self.gen}"
        self.n = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            try:
                self.prod.poll(0)
                if self.outstanding >= 200:
                    self.prod.poll(0.05)
                    continue
                self.send_one()
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    self.prod.poll(delay)
                else:
                    next_at = time.monotonic()
            except KafkaException as e:
                if not e.args[0].fatal():
                    time.sleep(0.1)
                    continue
                self.replace(e)
        try:
            left = self.prod.flush(60)
        except KafkaException as e:
            left = len(self.prod)
            self.h.write(f="note", type="info", proc=self.proc, msg=f"final flush: {_err_name(e)}")
        if left:
            self.h.write(f="note", type="info", proc=self.proc, msg=f"{left} sends unacknowledged at the end")

    def replace(self, e: KafkaException) -> None:
        """A fatal idempotence error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER when
        the broker lost data): what is in flight fails, a new producer (new
        producer id, new proc name) takes over."""
        self.h.write(f="producer-fatal", type="info", proc=self.proc, error=_err_name(e))
        try:
            self.prod.purge()
            self.prod.poll(0)
        except KafkaException:
            pass
        self.gen += 1
        self.proc = f"{self.base}.{self.gen}"
        self.outstanding = 0
        self.prod = self._producer()

    def send_one(self) -> None:
        proc, n = self.proc, self.n
        self.n += 1
        value = f"{proc}-{n}"
        p = n % self.partitions
        inv = self.h.write(f="send", type="invoke", proc=proc, topic=self.topic, partition=p, value=value)
        self.outstanding += 1

        def done(err, msg):
            self.outstanding -= 1
            lat = time.time() - inv["ts"]
            if err is None:
                self.h.write(f="send", type="ok", proc=proc, topic=self.topic, partition=msg.partition(),
                             offset=msg.offset(), value=value, lat=round(lat, 4))
            else:
                self.h.write(f="send", type="info", proc=proc, topic=self.topic, partition=p,
                             value=value, error=_err_name(err), lat=round(lat, 4))
        try:
            self.prod.produce(self.topic, value=value.encode(), partition=p, on_delivery=done)
        except BufferError as e:
            self.outstanding -= 1
            self.h.write(f="send", type="fail", proc=proc, topic=self.topic, partition=p, value=value,
                         error=_err_name(e))
            self.prod.poll(0.1)
        except KafkaException as e:
            self.outstanding -= 1
            self.h.write(f="send", type="fail", proc=proc, topic=self.topic, partition=p, value=value,
                         error=_err_name(e))
            raise


class ConsumerLoop:
    """A consumer recording its polls: ``assign`` mode reads every partition
    from the beginning; ``subscribe`` mode joins ``group`` and commits after
    each batch (synchronously, so commits are ordered)."""

    def __init__(self, h: HistoryWriter, bootstrap: str, proc: str, topics: list[str], partitions: int,
                 stop: threading.Event, mode: str = "assign", group: str | None = None,
                 isolation: str = "read_uncommitted"):
        self.h, self.bootstrap, self.proc, self.topics = h, bootstrap, proc, topics
        self.partitions, self.stop, self.mode, self.group, self.isolation = partitions, stop, mode, group, isolation
        self.thread = threading.Thread(target=self.run, name=proc, daemon=True)

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group or f"chaos-{self.proc}",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": self.isolation, "session.timeout.ms": 10000,
                      "heartbeat.interval.ms": 1000, **QUIET})
        h, proc = self.h, self.proc
        if self.mode == "assign":
            tps = [[t, p] for t in self.topics for p in range(self.partitions)]
            c.assign([TopicPartition(t, p, -2) for t, p in tps])
            h.write(f="assign", type="ok", proc=proc, partitions=tps)
        else:
            def on_assign(_c, parts):
                h.write(f="assign", type="ok", proc=proc, group=self.group,
                        partitions=[[tp.topic, tp.partition] for tp in parts])

            def on_revoke(_c, parts):
                h.write(f="revoke", type="ok", proc=proc, group=self.group,
                        partitions=[[tp.topic, tp.partition] for tp in parts])
            c.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not self.stop.is_set():
                poll_once(c, h, proc, self.isolation, self.group if self.mode == "subscribe" else None)
        finally:
            c.close()


class KafkaPythonConsumerLoop:
    """A second client implementation (kafka-python, pure Python): assigns
    every partition and reads from the beginning, like ConsumerLoop's assign
    mode; recreated after any error it cannot ride out."""

    def __init__(self, h: HistoryWriter, bootstrap: str, proc: str, topic: str, partitions: int,
                 stop: threading.Event):
        self.h, self.bootstrap, self.proc, self.topic, self.partitions, self.stop = (
            h, bootstrap, proc, topic, partitions, stop)
        self.thread = threading.Thread(target=self.run, name=proc, daemon=True)

    def run(self) -> None:
        import logging

        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        positions: dict[int, int] = {}
        while not self.stop.is_set():
            try:
                c = KafkaConsumer(bootstrap_servers=self.bootstrap.split(","), enable_auto_commit=False,
                                  group_id=None, request_timeout_ms=15000)
            except Exception as e:
                self.h.write(f="poll", type="fail", proc=self.proc, error=type(e).__name__)
                self.stop.wait(1)
                continue
            try:
                tps = [KTP(self.topic, p) for p in range(self.partitions)]
                c.assign(tps)
                for tp in tps:
                    c.seek(tp, positions.get(tp.partition, 0))
                self.h.write(f="assign", type="ok", proc=self.proc, partitions=[[self.topic, p.partition] for p in tps])
                while not self.stop.is_set():
                    batch = c.poll(timeout_ms=500, max_records=500)
                    recs = []
                    for tp, msgs in batch.items():
                        for m in msgs:
                            recs.append([tp.topic, tp.partition, m.offset, m.value.decode(errors="replace")])
                            positions[tp.partition] = m.offset + 1
                    if recs:
                        self.h.write(f="poll", type="ok", proc=self.proc, isolation="read_uncommitted",
                                     records=recs)
            except Exception as e:
                self.h.write(f="poll", type="fail", proc=self.proc, error=type(e).__name__)
                self.stop.wait(0.5)
            finally:
                try:
                    c.close()
                except Exception:
                    pass


def poll_once(c: Consumer, h: HistoryWriter, proc: str, isolation: str, group: str | None,
              timeout: float = 0.5) -> int:
    """One consume() call: records, errors, and (with a group) a synchronous
    commit of the offsets after the batch."""
    try:
        msgs = c.consume(500, timeout)
    except KafkaException as e:
        h.write(f="poll", type="fail", proc=proc, error=_err_name(e))
        time.sleep(0.2)
        return 0
    recs, nexts = [], {}
    for m in msgs:
        if m.error():
            if m.error().code() != KafkaError._PARTITION_EOF:
                h.write(f="poll", type="fail", proc=proc, error=m.error().name())
            continue
        recs.append([m.topic(), m.partition(), m.offset(), m.value().decode(errors="replace")])
        nexts[(m.topic(), m.partition())] = m.offset() + 1
    if recs:
        h.write(f="poll", type="ok", proc=proc, isolation=isolation, records=recs)
    if group and nexts:
        offs = [[t, p, o] for (t, p), o in nexts.items()]
        h.write(f="commit", type="invoke", proc=proc, group=group, offsets=offs)
        try:
            c.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offs], asynchronous=False)
            h.write(f="commit", type="ok", proc=proc, group=group, offsets=offs)
        except KafkaException as e:
            h.write(f="commit", type="fail", proc=proc, group=group, offsets=offs, error=_err_name(e))
    return len(recs)


class Copier:
    """Consume-transform-produce in transactions: reads ``src`` in group
    ``group`` (read_committed), writes value+">c" to ``dst``, commits its
    input offsets in the same transaction; aborts ``abort_rate`` of them on
    purpose and rewinds."""

    SUFFIX = ">c"

    def __init__(self, h: HistoryWriter, bootstrap: str, proc: str, src: str, dst: str, group: str,
                 stop: threading.Event, rng: random.Random, abort_rate: float = 0.1):
        self.h, self.bootstrap, self.proc, self.src, self.dst, self.group = h, bootstrap, proc, src, dst, group
        self.stop, self.rng, self.abort_rate = stop, rng, abort_rate
        self.txn_no = 0
        self.thread = threading.Thread(target=self.run, name=proc, daemon=True)

    def _clients(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "session.timeout.ms": 10000, **QUIET})
        c.subscribe([self.src])
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.proc}-tx",
                      "transaction.timeout.ms": 20000, "linger.ms": 5, **QUIET})
        t0 = time.time()
        while True:
            try:
                p.init_transactions(30)
                break
            except KafkaException as e:
                self.h.write(f="init-txn", type="fail", proc=self.proc, error=_err_name(e),
                             lat=round(time.time() - t0, 3))
                if e.args[0].fatal() or self.stop.is_set() and time.time() - t0 > 60:
                    raise
        self.h.write(f="init-txn", type="ok", proc=self.proc, lat=round(time.time() - t0, 3))
        return c, p

    def run(self) -> None:
        c, p = self._clients()
        try:
            while not self.stop.is_set():
                try:
                    self.step(c, p)
                except KafkaException as e:
                    # fatal (fenced, or an unknown commit outcome): start over with
                    # new clients, which fence the old ones and rewind to committed
                    self.h.write(f="copier-restart", type="info", proc=self.proc, error=_err_name(e))
                    for closer in (c.close, lambda: p.flush(1)):
                        try:
                            closer()
                        except Exception:
                            pass
                    c, p = self._clients()
        finally:
            try:
                c.close()
            except Exception:
                pass

    def step(self, c: Consumer, p: Producer) -> None:
        msgs = [m for m in c.consume(50, 0.5) if not m.error()]
        if not msgs:
            return
        self.txn_no += 1
        tid = f"{self.proc}-{self.txn_no}"
        outcome = "abort" if self.rng.random() < self.abort_rate else "commit"
        reads = [[m.topic(), m.partition(), m.offset(), m.value().decode()] for m in msgs]
        writes = [[self.dst, r[3] + self.SUFFIX] for r in reads]
        inv = self.h.write(f="txn", type="invoke", proc=self.proc, txn=tid, outcome=outcome,
                           reads=reads, writes=writes)
        offsets: list = []
        phases: dict[str, float] = {}
        mark = [time.monotonic()]

        def phase(name: str) -> None:
            # how long each transactional call took: where a stall sits
            now = time.monotonic()
            phases[name] = round(now - mark[0], 3)
            mark[0] = now
        first: dict[tuple, int] = {}
        for m in msgs:
            first.setdefault((m.topic(), m.partition()), m.offset())
        try:
            p.begin_transaction()
            phase("begin")
            for _t, v in writes:
                p.produce(self.dst, value=v.encode(),
                          on_delivery=lambda err, msg: err is None and offsets.append(
                              [msg.topic(), msg.partition(), msg.offset(), msg.value().decode()]))
            if outcome == "commit":
                pos = {}
                for m in msgs:
                    pos[(m.topic(), m.partition())] = m.offset() + 1
                p.send_offsets_to_transaction([TopicPartition(t, q, o) for (t, q), o in pos.items()],
                                              c.consumer_group_metadata(), 30)
                phase("send_offsets")
                p.flush(30)
                phase("flush")
                self.h.write(f="txn-commit", type="invoke", proc=self.proc, txn=tid)
                self._commit(p)
                phase("commit")
                self.h.write(f="txn", type="ok", proc=self.proc, txn=tid, outcome="commit", offsets=offsets,
                             lat=round(time.time() - inv["ts"], 3), phases=phases)
                return
            p.flush(30)
            phase("flush")
            p.abort_transaction(30)
            phase("abort")
            self.h.write(f="txn", type="ok", proc=self.proc, txn=tid, outcome="abort", offsets=offsets,
                         lat=round(time.time() - inv["ts"], 3), phases=phases)
        except KafkaException as e:
            err = e.args[0]
            phase("failed call")
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    phase("abort")
                    self.h.write(f="txn", type="ok", proc=self.proc, txn=tid, outcome="abort", offsets=offsets,
                                 error=_err_name(e), lat=round(time.time() - inv["ts"], 3), phases=phases)
                except KafkaException as e2:
                    self.h.write(f="txn", type="info", proc=self.proc, txn=tid, error=_err_name(e2),
                                 lat=round(time.time() - inv["ts"], 3), phases=phases)
                    raise
            else:
                self.h.write(f="txn", type="info", proc=self.proc, txn=tid, error=_err_name(e),
                             lat=round(time.time() - inv["ts"], 3), phases=phases)
                raise
        # aborted: read the same input again
        for (t, q), off in first.items():
            c.seek(TopicPartition(t, q, off))
        self.h.write(f="seek", type="ok", proc=self.proc, partitions=[[t, q, o] for (t, q), o in first.items()])

    def _commit(self, p: Producer) -> None:
        t0 = time.monotonic()
        while True:
            try:
                p.commit_transaction(30)
                return
            except KafkaException as e:
                if e.args[0].retriable() and time.monotonic() - t0 < 120:
                    self.h.write(f="txn-commit", type="fail", proc=self.proc, error=_err_name(e), retry=True)
                    continue
                raise


class GroupChurn:
    """Consumer group members as processes (tools/chaos/member.py): joining,
    leaving (SIGTERM: close) and crashing (SIGKILL), on a seeded timeline."""

    def __init__(self, h: HistoryWriter, history_path: str, bootstrap: str, prefix: str, topic: str,
                 group: str, stop: threading.Event, rng: random.Random, members: int = 3,
                 every: tuple[float, float] = (3.0, 8.0), log_dir: str = "/tmp"):
        self.h, self.path, self.bootstrap, self.prefix, self.topic, self.group = (
            h, history_path, bootstrap, prefix, topic, group)
        self.stop, self.rng, self.target, self.every, self.log_dir = stop, rng, members, every, log_dir
        self.procs: dict[str, subprocess.Popen] = {}
        self.n = 0
        self.thread = threading.Thread(target=self.run, name=f"{prefix}-churn", daemon=True)

    def spawn(self) -> None:
        name = f"{self.prefix}m{self.n}"
        self.n += 1
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        log = open(os.path.join(self.log_dir, f"{name}.log"), "w")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tools.chaos.member", "--bootstrap", self.bootstrap, "--topic", self.topic,
             "--group", self.group, "--history", self.path, "--proc", name],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        log.close()
        self.h.write(f="member-start", type="info", proc=name, group=self.group)

    def run(self) -> None:
        for _ in range(self.target):
            self.spawn()
        while not self.stop.wait(self.rng.uniform(*self.every)):
            live = [n for n, p in self.procs.items() if p.poll() is None]
            action = self.rng.choice(["crash", "leave", "join"])
            if action in ("crash", "leave") and live:
                victim = self.rng.choice(sorted(live))
                proc = self.procs[victim]
                if action == "crash":
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    self.h.write(f="crash", type="info", proc=victim, group=self.group)
                else:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        self.h.write(f="crash", type="info", proc=victim, group=self.group)
            live = [n for n, p in self.procs.items() if p.poll() is None]
            while len(live) < self.target:
                self.spawn()
                live.append("new")
        self.close()

    def close(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.h.write(f="crash", type="info", proc=name, group=self.group)


def final_read(h: HistoryWriter, bootstrap: str, topics: dict[str, tuple[int, str]],
               groups: dict[str, list[tuple[str, int]]], deadline_s: float = 90) -> dict:
    """After the faults: read every partition of ``topics`` ({topic:
    (partitions, isolation)}) from the beginning to its end offset, and fetch
    the committed offsets of ``groups``. Returns the final operation's fields."""
    end_offsets: dict[str, int] = {}
    complete = True
    for isolation in ("read_uncommitted", "read_committed"):
        tps = [(t, p) for t, (n, iso) in topics.items() if iso == isolation for p in range(n)]
        if not tps:
            continue
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final", "enable.auto.commit": False,
                      "isolation.level": isolation, "auto.offset.reset": "earliest", **QUIET})
        deadline = time.monotonic() + deadline_s
        ends = {}
        for t, p in tps:
            while True:
                try:
                    ends[(t, p)] = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        c.assign([TopicPartition(t, p, -2) for t, p in tps])
        pos = {tp: -1 for tp in tps}
        idle_since = time.monotonic()
        while time.monotonic() < deadline:
            msgs = c.consume(1000, 0.5)
            recs = []
            for m in msgs:
                if m.error():
                    continue
                recs.append([m.topic(), m.partition(), m.offset(), m.value().decode(errors="replace")])
                pos[(m.topic(), m.partition())] = m.offset()
            if recs:
                h.write(f="poll", type="ok", proc="final", isolation=isolation, records=recs)
                idle_since = time.monotonic()
            if all(pos[tp] >= ends[tp] - 1 for tp in tps):
                break
            # read_committed stops short of trailing transaction markers
            if time.monotonic() - idle_since > 5:
                break
        else:
            complete = False
        c.close()
        for (t, p), e in ends.items():
            end_offsets[tp_key(t, p)] = e
    committed: dict[str, dict[str, int]] = {}
    for g, tps in groups.items():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False, **QUIET})
        try:
            res = c.committed([TopicPartition(t, p) for t, p in tps], timeout=30)
            committed[g] = {tp_key(tp.topic, tp.partition): tp.offset for tp in res if tp.offset >= 0}
        except KafkaException as e:
            complete = False
            h.write(f="note", type="info", proc="final", msg=f"committed offsets of {g}: {_err_name(e)}")
        c.close()
    return {"end_offsets": end_offsets, "committed": committed, "complete": complete}
