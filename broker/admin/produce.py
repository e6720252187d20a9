"""`kproto produce TOPIC`: one record per input line (stdin or --file, with a progress bar on a
terminal), an optional key before a separator, constant headers, a fixed partition or Kafka's
default partitioner, compression and acks as the producer settings of the same names."""
from __future__ import annotations

import os
import sys

from kproto import compression as codecs
from kproto.messages.produce_request import ProduceRequest
from kproto.records import build_batch

from broker.admin import output
from broker.admin.errors import USAGE, AdminError, KafkaError
from broker.admin.partitioner import partition_for_key

CODECS = {"none": codecs.NONE, "gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4,
          "zstd": codecs.ZSTD}
ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def add_parser(sub, leaf) -> None:
    p = leaf(sub, "produce", "produce one record per input line")
    p.add_argument("topic")
    p.add_argument("-p", "--partition", type=int, default=None,
                   help="default: by key (Kafka's murmur2 partitioner), else round robin per batch")
    p.add_argument("-k", "--key-separator", default=None, metavar="SEP",
                   help="each line is KEY<SEP>VALUE (kafka-console-producer's parse.key)")
    p.add_argument("-H", "--header", action="append", default=[], metavar="KEY=VALUE",
                   help="a header on every record (repeatable)")
    p.add_argument("-z", "--compression", choices=sorted(CODECS), default="none")
    p.add_argument("--acks", choices=sorted(ACKS), default="all")
    p.add_argument("-f", "--file", help="read lines from this file instead of stdin (progress bar)")
    p.add_argument("--batch-size", type=int, default=500, help="records per batch (default 500)")


def _lines(stream):
    for raw in stream:
        yield raw[:-1] if raw.endswith(b"\n") else raw


def run(args, admin) -> int:
    headers = []
    for item in args.header:
        if "=" not in item:
            raise AdminError(f"--header expects key=value, got {item!r}", USAGE)
        k, v = item.split("=", 1)
        headers.append((k, v.encode()))
    sep = args.key_separator.encode() if args.key_separator else None
    acks = ACKS[args.acks]
    topic = admin.topic(args.topic)
    leaders = {p.partition_index: p.leader_id for p in topic.partitions}
    count = len(leaders)
    if args.partition is not None and args.partition not in leaders:
        raise KafkaError(3, f"{args.topic}-{args.partition}", f"the topic has {count} partitions")
    pending: dict[int, list] = {}
    results: dict[int, dict] = {}
    state = {"sent": 0, "next": 0}

    def send(partition: int) -> None:
        records = pending.pop(partition, [])
        if not records:
            return
        batch = build_batch(records, compression=CODECS[args.compression])
        req = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=int(admin.timeout * 1000), topic_data=[
            ProduceRequest.TopicProduceData(name=args.topic, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
        leader = leaders[partition]
        if leader < 0:
            raise KafkaError(5, f"{args.topic}-{partition}")
        resp = admin.node(leader).call(req, 9, expect_response=acks != 0)
        r = results.setdefault(partition, {"partition": partition, "records": 0, "first_offset": None,
                                           "last_offset": None})
        r["records"] += len(records)
        state["sent"] += len(records)
        if resp is not None:
            pr = resp.responses[0].partition_responses[0]
            if pr.error_code:
                raise KafkaError(pr.error_code, f"{args.topic}-{partition}", pr.error_message)
            if r["first_offset"] is None:
                r["first_offset"] = pr.base_offset
            r["last_offset"] = pr.base_offset + len(records) - 1

    def add(line: bytes) -> None:
        key, value = None, line
        if sep is not None:
            if sep not in line:
                raise AdminError(f"no key separator {args.key_separator!r} in line {line[:60]!r}", USAGE)
            key, value = line.split(sep, 1)
        if args.partition is not None:
            partition = args.partition
        elif key is not None:
            partition = partition_for_key(key, count)
        else:
            partition = state["next"]
        pending.setdefault(partition, []).append((key, value, headers))
        if len(pending[partition]) >= args.batch_size:
            send(partition)
            if key is None and args.partition is None:
                state["next"] = (partition + 1) % count   # sticky per batch, as Kafka's producer

    if args.file:
        try:
            f = open(args.file, "rb")
        except OSError as exc:
            raise AdminError(f"--file {args.file}: {exc.strerror or exc}", USAGE) from None
        with f:
            bar = output.progress(os.fstat(f.fileno()).st_size, args.file)
            if bar is None:
                for line in _lines(f):
                    add(line)
            else:
                with bar:
                    task = bar.add_task(os.path.basename(args.file), total=os.fstat(f.fileno()).st_size)
                    for line in _lines(f):
                        add(line)
                        bar.update(task, completed=f.tell())
    else:
        for line in _lines(sys.stdin.buffer):
            add(line)
    for partition in list(pending):
        send(partition)
    rows = [results[p] for p in sorted(results)]
    data = {"topic": args.topic, "records": state["sent"], "partitions": rows}
    output.emit(args, data, lambda d: print(
        f"Produced {d['records']} records to {d['topic']} "
        f"({', '.join('partition %d: %d' % (r['partition'], r['records']) for r in d['partitions']) or 'none'})",
        file=sys.stderr))
    return 0
