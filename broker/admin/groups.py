"""`kproto group list|describe|seek|delete`: what kafka-consumer-groups.sh does: groups and their
states, members and assignments, committed offset, log end and lag per partition with the total,
offset resets (earliest, latest, an offset, a timestamp, a shift; a dry run unless --execute, and
only while the group has no members, as Kafka requires) and deletion."""
from __future__ import annotations

import struct
import sys

from kproto.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from kproto.messages.consumer_protocol_assignment import ConsumerProtocolAssignment
from kproto.messages.delete_groups_request import DeleteGroupsRequest
from kproto.messages.describe_groups_request import DescribeGroupsRequest
from kproto.messages.list_groups_request import ListGroupsRequest
from kproto.messages.offset_commit_request import OffsetCommitRequest
from kproto.messages.offset_fetch_request import OffsetFetchRequest

from broker.admin import output
from broker.admin.client import COORDINATOR_RETRIABLE, EARLIEST, LATEST, parse_time
from broker.admin.errors import USAGE, AdminError, KafkaError, check

OFFSET_COLUMNS = [("group", "GROUP"), ("topic", "TOPIC"), ("partition", "PARTITION"),
                  ("current_offset", "CURRENT-OFFSET"), ("log_end_offset", "LOG-END-OFFSET"), ("lag", "LAG"),
                  ("consumer_id", "CONSUMER-ID"), ("host", "HOST"), ("client_id", "CLIENT-ID")]


def add_parser(sub, leaf) -> None:
    p = sub.add_parser("group", help="list, describe, reset offsets of and delete consumer groups")
    s = p.add_subparsers(dest="action", required=True)
    lst = leaf(s, "list", "groups with their state and protocol type")
    lst.add_argument("--state", action="append", default=[], help="only groups in this state (repeatable)")
    d = leaf(s, "describe", "members, assignments, offsets and lag per partition")
    d.add_argument("groups", nargs="+", metavar="GROUP")
    k = leaf(s, "seek", "reset a group's committed offsets (dry run unless --execute)")
    k.add_argument("group", metavar="GROUP")
    k.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                   help="the topic (and partitions) to reset (repeatable)")
    k.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    to = k.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-timestamp", metavar="TIME", help="ms since the epoch, or ISO-8601")
    to.add_argument("--shift-by", type=int)
    k.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show them)")
    k.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    dl = leaf(s, "delete", "delete groups (only groups without members)")
    dl.add_argument("groups", nargs="+", metavar="GROUP")


def run(args, admin) -> int:
    return {"list": list_groups, "describe": describe, "seek": seek, "delete": delete}[args.action](args, admin)


def list_groups(args, admin) -> int:
    groups = {}
    for node_id in sorted(admin.brokers()):
        resp = admin.node(node_id).call(ListGroupsRequest(states_filter=list(args.state)), 4)
        check(resp.error_code, f"ListGroups on broker {node_id}")
        for g in resp.groups:
            groups[g.group_id] = {"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type}
    rows = [groups[g] for g in sorted(groups)]
    output.emit(args, rows, lambda rows: output.table(
        rows, [("group", "GROUP"), ("state", "STATE"), ("protocol_type", "PROTOCOL-TYPE")]))
    return 0


def committed_offsets(admin, group: str, conn=None) -> dict[str, dict[int, int]]:
    """{topic: {partition: committed offset}} of a group (OffsetFetch for every topic)."""
    if conn is None:
        return admin.at_coordinator(group, lambda c: committed_offsets(admin, group, c))
    v = conn.version(OffsetFetchRequest, 8)
    if v >= 8:
        resp = conn.call(OffsetFetchRequest(require_stable=False, groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]), v)
        g = resp.groups[0]
        check(g.error_code, f"group {group}")
        topics = g.topics
    else:
        resp = conn.call(OffsetFetchRequest(group_id=group, topics=None), v)
        check(resp.error_code, f"group {group}")
        topics = resp.topics
    out: dict[str, dict[int, int]] = {}
    for t in topics:
        for p in t.partitions:
            check(p.error_code, f"group {group} at {t.name}-{p.partition_index}")
            if p.committed_offset >= 0:
                out.setdefault(t.name, {})[p.partition_index] = p.committed_offset
    return out


def _assignment(data) -> list[tuple[str, list[int]]]:
    if not data or len(data) < 2:
        return []
    version = struct.unpack_from(">h", data)[0]
    try:
        a = ConsumerProtocolAssignment.decode(bytes(data), min(version, ConsumerProtocolAssignment.MAX_VERSION), 2)
    except Exception:   # noqa: BLE001 (not a consumer's assignment: a connect worker's, say)
        return []
    return [(tp.topic, list(tp.partitions)) for tp in a.assigned_partitions]


class _Member:
    def __init__(self, member_id, group_instance_id, client_id, client_host, assigned):
        self.member_id, self.group_instance_id = member_id, group_instance_id
        self.client_id, self.client_host, self.assigned = client_id, client_host, assigned


def group_state(admin, conn, group: str) -> tuple[str, str, str, list[_Member]]:
    """(state, protocol type, protocol, members) of a classic group (DescribeGroups) or of a
    KIP-848 consumer group, which DescribeGroups reports Dead: then ConsumerGroupDescribe, as
    kafka-consumer-groups.sh asks by the group's type."""
    g = conn.call(DescribeGroupsRequest(groups=[group], include_authorized_operations=False), 5).groups[0]
    if g.error_code not in (0, 69) and g.error_code != 16:
        check(g.error_code, f"group {group}")
    if g.error_code == 0 and g.group_state != "Dead":
        members = [_Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           _assignment(m.member_assignment) if g.protocol_type == "consumer" else [])
                   for m in g.members]
        return g.group_state, g.protocol_type, g.protocol_data, members
    if ConsumerGroupDescribeRequest.API_KEY in conn.versions:
        d = conn.call(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False), 0).groups[0]
        if d.error_code == 0:
            members = [_Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                               [(tp.topic_name, list(tp.partitions)) for tp in m.assignment.topic_partitions])
                       for m in d.members]
            return d.group_state, "consumer", d.assignor_name, members
        # 69/16: not a consumer group either, Dead as DescribeGroups said; 35: a broker that lists
        # the API but has the consumer protocol off (Kafka 3.9's default) has no such groups
        if d.error_code not in (69, 16, 35):
            check(d.error_code, f"group {group}", d.error_message)
    check(g.error_code, f"group {group}")
    return "Dead", g.protocol_type, g.protocol_data, []


def describe_group(admin, group: str) -> dict:
    """State, members, and offsets with lag per partition of one group."""
    def at(conn):
        return group_state(admin, conn, group), committed_offsets(admin, group, conn)
    (state, protocol_type, protocol, group_members), committed = admin.at_coordinator(group, at)
    if state == "Dead" and not committed:
        raise KafkaError(69, f"group {group}", f"Consumer group '{group}' does not exist.")
    members, owner = [], {}
    for m in group_members:
        members.append({"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "host": m.client_host,
                        "assignment": [{"topic": t, "partitions": sorted(ps)} for t, ps in m.assigned]})
        for t, ps in m.assigned:
            for p in ps:
                owner[(t, p)] = m
    keys = {(t, p) for t, ps in committed.items() for p in ps} | set(owner)
    ends: dict[str, dict[int, int]] = {}
    for t in sorted({t for t, _ in keys}):
        try:
            ends[t] = admin.list_offsets(t, {p: 0 for tt, p in keys if tt == t}, LATEST)
        except KafkaError:
            ends[t] = {}
    rows = []
    for t, p in sorted(keys):
        cur = committed.get(t, {}).get(p)
        end = ends.get(t, {}).get(p)
        m = owner.get((t, p))
        rows.append({"group": group, "topic": t, "partition": p, "current_offset": cur, "log_end_offset": end,
                     "lag": None if cur is None or end is None else max(0, end - cur),
                     "consumer_id": m.member_id if m else None, "host": m.client_host if m else None,
                     "client_id": m.client_id if m else None})
    return {"group": group, "state": state, "protocol_type": protocol_type, "protocol": protocol,
            "members": members, "offsets": rows, "total_lag": sum(r["lag"] or 0 for r in rows)}


def describe(args, admin) -> int:
    data = [describe_group(admin, g) for g in args.groups]

    def render(data):
        for d in data:
            print(f"Consumer group '{d['group']}' is {d['state']} with {len(d['members'])} members; "
                  f"total lag {d['total_lag']}")
            if d["offsets"]:
                output.table(d["offsets"], OFFSET_COLUMNS)
    output.emit(args, data, render)
    return 0


def _targets(args, admin, committed) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    if args.all_topics:
        out = {t: sorted(ps) for t, ps in committed.items()}
    for item in args.topic:
        name, _, parts = item.partition(":")
        if parts:
            try:
                out[name] = sorted(int(x) for x in parts.split(","))
            except ValueError:
                raise AdminError(f"--topic {item!r}: partitions are numbers (TOPIC:0,1)", USAGE) from None
        else:
            out[name] = [p.partition_index for p in admin.topic(name).partitions]
    if not out:
        raise AdminError("seek needs --topic TOPIC or --all-topics", USAGE)
    return out


def reset_plan(admin, conn, group: str, targets: dict[str, list[int]], to: str, value=None) -> list[dict]:
    """The new offsets of a reset: `to` is earliest, latest, offset, timestamp (value: ms or
    ISO-8601) or shift (value: +-N from the committed offset); refused while the group has members."""
    state = group_state(admin, conn, group)[0]
    if state not in ("Empty", "Dead"):
        # kafka-consumer-groups.sh's refusal, word for word
        raise AdminError(f"Assignments can only be reset if the group '{group}' is inactive, but the "
                         f"current state is {state}.")
    committed = committed_offsets(admin, group, conn)
    plan = []
    for topic, parts in sorted(targets.items()):
        wanted = dict.fromkeys(parts, 0)
        earliest = admin.list_offsets(topic, wanted, EARLIEST)
        latest = admin.list_offsets(topic, wanted, LATEST)
        if to == "timestamp":
            at = admin.list_offsets(topic, wanted, parse_time(str(value)))
        for p in parts:
            if to == "earliest":
                new = earliest[p]
            elif to == "latest":
                new = latest[p]
            elif to == "offset":
                new = int(value)
            elif to == "timestamp":
                new = at[p] if at[p] >= 0 else latest[p]
            else:
                new = committed.get(topic, {}).get(p, latest[p]) + int(value)
            new = min(max(new, earliest[p]), latest[p])   # Kafka clamps into the log's range
            plan.append({"group": group, "topic": topic, "partition": p, "new_offset": new})
    return plan


def commit_plan(conn, group: str, plan: list[dict]) -> None:
    """Commit a reset plan's offsets (as a non-member: generation -1, no member id)."""
    by_topic: dict[str, list] = {}
    for r in plan:
        by_topic.setdefault(r["topic"], []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=r["partition"], committed_offset=r["new_offset"], committed_leader_epoch=-1,
            committed_metadata=""))
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                              group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                  name=t, partitions=ps) for t, ps in by_topic.items()])
    for t in conn.call(req, 8).topics:
        for p in t.partitions:
            check(p.error_code, f"group {group} at {t.name}-{p.partition_index}")


def seek(args, admin) -> int:
    group = args.group
    conn = admin.coordinator(group)
    if args.to_earliest:
        to, value = "earliest", None
    elif args.to_latest:
        to, value = "latest", None
    elif args.to_offset is not None:
        to, value = "offset", args.to_offset
    elif args.to_timestamp is not None:
        to, value = "timestamp", args.to_timestamp
    else:
        to, value = "shift", args.shift_by
    targets = _targets(args, admin, committed_offsets(admin, group))
    plan = reset_plan(admin, conn, group, targets, to, value)
    if args.execute:
        admin.at_coordinator(group, lambda c: commit_plan(c, group, plan))
    else:
        print("WARN: No action will be performed as the --execute option is missing. "
              "In a future major release, the default behavior of this command will be to prompt the user "
              "before executing the reset rather than doing a dry run. You should add the --dry-run option "
              "explicitly if you are scripting this command and want to keep the current default behavior "
              "without prompting.", file=sys.stderr)
    output.emit(args, {"executed": args.execute, "offsets": plan}, lambda d: output.table(
        d["offsets"], [("group", "GROUP"), ("topic", "TOPIC"), ("partition", "PARTITION"),
                       ("new_offset", "NEW-OFFSET")]))
    return 0


def _delete_one(conn, group: str):
    r = conn.call(DeleteGroupsRequest(groups_names=[group]), 2).results[0]
    if r.error_code in COORDINATOR_RETRIABLE:
        raise KafkaError(r.error_code, f"group {group}")   # at_coordinator looks again
    return r


def delete(args, admin) -> int:
    results, failure = [], None
    for group in args.groups:
        r = admin.at_coordinator(group, lambda c: _delete_one(c, group))
        if r.error_code:
            failure = failure or KafkaError(r.error_code, f"group {group}")
        else:
            results.append({"group": group, "deleted": True})
    output.emit(args, results, lambda rows: rows and print(
        "Deletion of requested consumer groups (" + ", ".join(f"'{r['group']}'" for r in rows) +
        ") was successful."))
    if failure:
        raise failure
    return 0
