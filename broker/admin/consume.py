"""`kproto consume TOPIC`: read records from chosen partitions, starting at the beginning, the end,
an offset, a timestamp or a group's committed offsets; stop after a count, at the end of the log
(-e) or after an idle timeout; print each record as text (chosen fields, tab-separated) or one JSON
object per line, values as text, JSON or hex.

With --group (and no --partition or --offset) the reader joins the group as a KIP-848 consumer
(broker/admin/membership.py): it reads the partitions the coordinator assigns it, each from the
group's committed offset (else from the beginning with --from-beginning, else the end, as
auto.offset.reset), commits a partition's position when it is revoked and all of them at the end,
then leaves. With --partition or --offset, or where the coordinator refuses the consumer protocol,
it does not join: it starts from the committed offsets and commits where it stopped, as an
assign()-mode consumer with a group.id does (Kafka accepts such commits while the group has no
members)."""
from __future__ import annotations

import base64
import json
import sys
import time

from kproto.messages.fetch_request import FetchRequest
from kproto.messages.offset_commit_request import OffsetCommitRequest
from kproto.records import control_record_type, iter_batch_headers, iter_records

from broker.admin.client import EARLIEST, LATEST, parse_time
from broker.admin.errors import USAGE, AdminError, KafkaError, check

FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def add_parser(sub, leaf) -> None:
    p = leaf(sub, "consume", "read records")
    p.add_argument("topic")
    p.add_argument("-p", "--partition", type=int, action="append", default=None,
                   help="a partition to read (repeatable; default all)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start at this offset (with one --partition), or earliest/latest")
    start.add_argument("--from-timestamp", metavar="TIME",
                       help="start at the first record at or after TIME (ms since the epoch, or ISO-8601)")
    p.add_argument("-g", "--group", help="start from this group's committed offsets and commit at the end")
    p.add_argument("-n", "--count", type=int, default=None, help="stop after this many records")
    p.add_argument("-e", "--exit-at-end", action="store_true", help="stop at the end of every partition")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop after this long without a record")
    p.add_argument("--print", dest="fields", default="value",
                   help=f"text mode: comma-separated fields of {','.join(FIELDS)} (default value)")
    p.add_argument("--decode", choices=("auto", "text", "json", "hex", "base64"), default="auto",
                   help="how keys and values are shown (auto: text when UTF-8, else hex)")
    p.add_argument("--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    p.set_defaults(format="text")


def decode(data, how: str):
    if data is None:
        return None
    data = bytes(data)
    if how == "hex":
        return data.hex()
    if how == "base64":
        return base64.b64encode(data).decode()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex() if how in ("auto", "json") else data.decode("utf-8", "replace")
    if how == "json":
        try:
            return json.loads(text)
        except ValueError:
            return text
    if how == "auto" and any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return data.hex()
    return text


def starting_offsets(args, admin, partitions: list[int]) -> dict[int, int]:
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        try:
            offset = int(args.offset)
        except ValueError:
            raise AdminError(f"--offset {args.offset!r}: a number, earliest or latest", USAGE) from None
        if offset < 0:
            raise AdminError("--offset: a negative offset; use earliest or latest", USAGE)
        return {p: offset for p in partitions}
    reset = EARLIEST if args.from_beginning or args.offset == "earliest" else LATEST
    if args.from_timestamp is not None:
        found = admin.list_offsets(args.topic, dict.fromkeys(partitions), parse_time(args.from_timestamp))
        ends = admin.list_offsets(args.topic, dict.fromkeys(partitions), LATEST)
        return {p: found[p] if found[p] >= 0 else ends[p] for p in partitions}
    out = {}
    if args.group and args.offset is None and (not args.from_beginning or getattr(args, "joined", False)):
        from broker.admin.groups import committed_offsets
        committed = committed_offsets(admin, args.group).get(args.topic, {})
        out = {p: committed[p] for p in partitions if committed.get(p, -1) >= 0}
    rest = [p for p in partitions if p not in out]
    if rest:
        out.update(admin.list_offsets(args.topic, dict.fromkeys(rest), reset))
    return out


def run(args, admin) -> int:
    fields = [f.strip() for f in args.fields.split(",") if f.strip()]
    bad = [f for f in fields if f not in FIELDS]
    if bad:
        raise AdminError(f"--print: unknown field {bad[0]!r} (one of {','.join(FIELDS)})", USAGE)
    json_mode = args.format == "json"
    topic = admin.topic(args.topic)
    all_parts = [p.partition_index for p in topic.partitions]
    parts = args.partition or all_parts
    for p in parts:
        if p not in all_parts:
            raise KafkaError(3, f"{args.topic}-{p}", f"the topic has {len(all_parts)} partitions")
    member = _join(args, admin, topic)
    if member is not None:
        parts = []
        args.joined = True
    positions = starting_offsets(args, admin, parts) if parts else {}
    leaders = {p.partition_index: p.leader_id for p in topic.partitions}
    at_end: set[int] = set()
    seen = 0
    last_record = time.monotonic()
    isolation = 1 if args.isolation == "read_committed" else 0
    out = sys.stdout
    try:
        while True:
            if args.count is not None and seen >= args.count:
                break
            if args.exit_at_end and at_end >= set(parts) and (parts or member is None):
                break
            if member is not None:
                new = member.beat()
                if new is not None and new != parts:
                    parts = _rebalance(args, admin, member, parts, new, positions, at_end)
                if not parts:
                    time.sleep(0.1)
                    continue
            if args.idle_timeout is not None and time.monotonic() - last_record > args.idle_timeout:
                break
            by_leader: dict[int, list[int]] = {}
            for p in parts:
                by_leader.setdefault(leaders[p], []).append(p)
            got_any = False
            for leader, lparts in by_leader.items():
                if leader < 0:
                    leaders.update({p.partition_index: p.leader_id for p in admin.topic(args.topic).partitions})
                    time.sleep(0.2)
                    continue
                req = FetchRequest(replica_id=-1, max_wait_ms=200 if len(by_leader) == 1 else 50, min_bytes=1,
                                   max_bytes=8 << 20, isolation_level=isolation, session_id=0, session_epoch=-1,
                                   topics=[FetchRequest.FetchTopic(topic=args.topic, partitions=[
                                       FetchRequest.FetchPartition(partition=p, current_leader_epoch=-1,
                                                                   fetch_offset=positions[p],
                                                                   partition_max_bytes=1 << 20)
                                       for p in lparts])])
                resp = admin.node(leader).call(req, 12)
                check(resp.error_code, "Fetch")
                for rt in resp.responses:
                    for rp in sorted(rt.partitions, key=lambda x: x.partition_index):
                        p = rp.partition_index
                        if rp.error_code == 1:   # OFFSET_OUT_OF_RANGE: the auto.offset.reset policy
                            reset = EARLIEST if args.from_beginning else LATEST
                            positions[p] = admin.list_offsets(args.topic, {p: 0}, reset)[p]
                            continue
                        if rp.error_code in (5, 6, 3):
                            leaders.update({x.partition_index: x.leader_id
                                            for x in admin.topic(args.topic).partitions})
                            continue
                        check(rp.error_code, f"{args.topic}-{p}")
                        for rec in data_records(rp.records, positions[p], rp.aborted_transactions if isolation else ()):
                            if args.count is not None and seen >= args.count:
                                break
                            _print(out, args, fields, json_mode, p, rec)
                            positions[p] = rec.offset + 1
                            seen += 1
                            got_any = True
                        end = rp.last_stable_offset if isolation and rp.last_stable_offset >= 0 else rp.high_watermark
                        if positions[p] >= end:
                            at_end.add(p)
                        elif args.count is None or seen < args.count:
                            at_end.discard(p)
                            # a control batch or aborted data past our position: move on
                            positions[p] = max(positions[p], _next_offset(rp.records, positions[p]))
            if got_any:
                last_record = time.monotonic()
                out.flush()
    finally:
        out.flush()
        if member is not None:
            try:
                member.commit(positions)
            finally:
                member.leave()
        elif args.group:
            _commit(admin, args.group, args.topic, positions)
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def _join(args, admin, topic):
    """A joined GroupMember for `--group` without explicit partitions or offsets, else None."""
    if not args.group or args.partition or args.offset is not None or args.from_timestamp is not None:
        return None
    from broker.admin.membership import GroupMember, NotJoinable
    member = GroupMember(admin, args.group, args.topic, topic.topic_id)
    try:
        member.join()
    except NotJoinable as exc:
        print(f"kproto: not joining group {args.group} ({exc}); reading every partition from its "
              "committed offsets", file=sys.stderr)
        return None
    return member


def _rebalance(args, admin, member, parts, new, positions, at_end) -> list[int]:
    """Take a new assignment: commit and drop what was revoked, start what was added."""
    revoked = [p for p in parts if p not in new]
    if revoked:
        member.commit({p: positions[p] for p in revoked if p in positions})
        for p in revoked:
            positions.pop(p, None)
            at_end.discard(p)
    added = [p for p in new if p not in parts]
    if added:
        positions.update(starting_offsets(args, admin, added))
    member.acknowledge(new)
    return list(new)


def data_records(data, position: int, aborted=()):
    """The data records at or after `position`; with read_committed (`aborted`: the fetch answer's
    aborted transactions) without those of aborted transactions, as Kafka's consumer filters them:
    a producer's batches from an aborted transaction's first offset up to its ABORT marker."""
    if not data:
        return
    starts = sorted((t.first_offset, t.producer_id) for t in aborted or ())
    ongoing: set[int] = set()
    for pos, header in iter_batch_headers(data, allow_partial_tail=True):
        while starts and starts[0][0] <= header.last_offset:
            ongoing.add(starts.pop(0)[1])
        if header.is_control:
            for rec in iter_records(data, pos):
                if control_record_type(rec) == 0:   # ABORT: this producer's next batches are live
                    ongoing.discard(header.producer_id)
            continue
        if header.last_offset < position or (header.is_transactional and header.producer_id in ongoing):
            continue
        for rec in iter_records(data, pos):
            if rec.offset >= position:
                yield rec


def _next_offset(data, position: int) -> int:
    """Past the last whole batch of a fetch answer (skipping control batches)."""
    last = position
    if data:
        for _pos, header in iter_batch_headers(data, allow_partial_tail=True):
            last = max(last, header.last_offset + 1)
    return last


def _print(out, args, fields, json_mode: bool, partition: int, rec) -> None:
    values = {"topic": args.topic, "partition": partition, "offset": rec.offset, "timestamp": rec.timestamp,
              "key": decode(rec.key, args.decode), "value": decode(rec.value, args.decode),
              "headers": [[k, decode(v, args.decode)] for k, v in rec.headers]}
    if json_mode:
        out.write(json.dumps(values) + "\n")
        return
    parts = []
    for f in fields:
        v = values[f]
        if f == "headers":
            v = ";".join(f"{k}={'' if hv is None else hv}" for k, hv in v)
        elif isinstance(v, (dict, list)):
            v = json.dumps(v)
        parts.append("" if v is None else str(v))
    out.write("\t".join(parts) + "\n")


def _commit(admin, group: str, topic: str, positions: dict[int, int]) -> None:
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                              group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                  name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                      partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                      committed_metadata="") for p, o in sorted(positions.items())])])
    def commit(conn):
        for t in conn.call(req, 8).topics:
            for p in t.partitions:
                check(p.error_code, f"commit of group {group} at {t.name}-{p.partition_index}")
    admin.at_coordinator(group, commit)
