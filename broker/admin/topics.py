"""`kproto topic create|list|describe|delete|alter-config|add-partitions`: what kafka-topics.sh and
kafka-configs.sh do for topics, with partition sizes (DescribeLogDirs) and config sources."""
from __future__ import annotations

import sys
import time

from kproto.messages.create_partitions_request import CreatePartitionsRequest
from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.delete_topics_request import DeleteTopicsRequest
from kproto.messages.describe_configs_request import DescribeConfigsRequest
from kproto.messages.describe_log_dirs_request import DescribeLogDirsRequest
from kproto.messages.incremental_alter_configs_request import IncrementalAlterConfigsRequest

from broker.admin import output
from broker.admin.connection import ConnectionFailed
from broker.admin.errors import USAGE, AdminError, KafkaError, check

TOPIC_RESOURCE = 2
# Kafka's DescribeConfigsResponse.ConfigSource names
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


def add_parser(sub, leaf) -> None:
    p = sub.add_parser("topic", help="create, list, describe, delete and configure topics")
    s = p.add_subparsers(dest="action", required=True)
    c = leaf(s, "create", "create topics")
    c.add_argument("names", nargs="+", metavar="TOPIC")
    c.add_argument("-p", "--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    c.add_argument("-r", "--replication-factor", type=int, default=-1,
                   help="default: the broker's default.replication.factor")
    c.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true", help="an existing topic is not an error")
    c.add_argument("--dry-run", action="store_true", help="validate only (CreateTopics validateOnly)")
    lst = leaf(s, "list", "list topics")
    lst.add_argument("--exclude-internal", action="store_true", help="leave out __consumer_offsets and co.")
    d = leaf(s, "describe", "partitions, leaders, ISR, offline replicas, sizes and configs")
    d.add_argument("names", nargs="*", metavar="TOPIC", help="default: every topic")
    d.add_argument("--all-configs", action="store_true", help="show default configs too (table)")
    d.add_argument("--no-sizes", action="store_true", help="skip DescribeLogDirs (one request per broker)")
    dl = leaf(s, "delete", "delete topics")
    dl.add_argument("names", nargs="+", metavar="TOPIC")
    dl.add_argument("--if-exists", action="store_true", help="a missing topic is not an error")
    a = leaf(s, "alter-config", "set or delete topic configs (IncrementalAlterConfigs)")
    a.add_argument("name", metavar="TOPIC")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a.add_argument("--delete", action="append", default=[], metavar="KEY", help="back to the default")
    ap = leaf(s, "add-partitions", "raise a topic's partition count")
    ap.add_argument("name", metavar="TOPIC")
    ap.add_argument("--count", type=int, required=True, help="the new total number of partitions")


def run(args, admin) -> int:
    return {"create": create, "list": list_topics, "describe": describe, "delete": delete,
            "alter-config": alter_config, "add-partitions": add_partitions}[args.action](args, admin)


def _kv(items: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        if "=" not in item:
            raise AdminError(f"{flag} expects key=value, got {item!r}", USAGE)
        k, v = item.split("=", 1)
        out.append((k.strip(), v.strip()))
    return out


def create(args, admin) -> int:
    configs = [CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in _kv(args.config, "--config")]
    req = CreateTopicsRequest(timeout_ms=int(admin.timeout * 1000), validate_only=args.dry_run, topics=[
        CreateTopicsRequest.CreatableTopic(name=n, num_partitions=args.partitions,
                                           replication_factor=args.replication_factor, configs=configs)
        for n in args.names])
    resp = admin.call(req, 7)
    results, failure = [], None
    for t in resp.topics:
        if t.error_code == 36 and args.if_not_exists:
            results.append({"name": t.name, "created": False})
            continue
        if t.error_code:
            failure = failure or KafkaError(t.error_code, f"topic {t.name}", t.error_message)
            continue
        results.append({"name": t.name, "created": not args.dry_run, "topic_id": str(t.topic_id),
                        "partitions": t.num_partitions, "replication_factor": t.replication_factor})
    if not args.dry_run:
        _wait_for_leaders(admin, [r["name"] for r in results if r["created"]])
    output.emit(args, results, lambda rows: [print(
        f"{'Validated' if args.dry_run else 'Created' if r['created'] else 'Exists:'} topic {r['name']}.")
        for r in rows])
    if failure:
        raise failure
    return 0


def _wait_for_leaders(admin, names: list[str]) -> None:
    """Until every new partition has a leader, so that the next command (produce) finds them."""
    deadline = time.monotonic() + admin.timeout
    while names and time.monotonic() < deadline:
        topics = admin.metadata(names).topics
        if all(t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions)
               for t in topics):
            return
        time.sleep(0.1)


def list_topics(args, admin) -> int:
    topics = sorted(admin.metadata(None).topics, key=lambda t: t.name)
    rows = [{"name": t.name, "topic_id": str(t.topic_id), "partitions": len(t.partitions),
             "replication_factor": len(t.partitions[0].replica_nodes) if t.partitions else 0,
             "internal": t.is_internal}
            for t in topics if not (args.exclude_internal and t.is_internal)]
    output.emit(args, rows, lambda rows: output.table(
        rows, [("name", "NAME"), ("partitions", "PARTITIONS"), ("replication_factor", "REPLICAS"),
               ("internal", "INTERNAL")]))
    return 0


def describe_configs(admin, resource_type: int, names: list[str]) -> dict[str, list[dict]]:
    req = DescribeConfigsRequest(include_synonyms=False, include_documentation=False, resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=n,
                                                       configuration_keys=None) for n in names])
    out = {}
    for r in admin.call(req, 4).results:
        check(r.error_code, r.resource_name, r.error_message)
        out[r.resource_name] = [{"name": c.name, "value": None if c.is_sensitive else c.value,
                                 "source": CONFIG_SOURCES.get(c.config_source, str(c.config_source)),
                                 "read_only": c.read_only, "sensitive": c.is_sensitive}
                                for c in sorted(r.configs, key=lambda c: c.name)]
    return out


def partition_sizes(admin, topics) -> dict[tuple[str, int], dict[int, int]]:
    """{(topic, partition): {broker: size in bytes}} from DescribeLogDirs on every broker."""
    req = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
        topic=t.name, partitions=[p.partition_index for p in t.partitions]) for t in topics])
    sizes: dict[tuple[str, int], dict[int, int]] = {}
    for node_id in sorted(admin.brokers()):
        try:
            resp = admin.node(node_id).call(req, 4)
        except ConnectionFailed as exc:   # a broker just gone: the others' sizes still count
            print(f"kproto: warning: no sizes from broker {node_id}: {exc}", file=sys.stderr)
            continue
        for d in resp.results:
            if d.error_code:
                continue
            for t in d.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        sizes.setdefault((t.name, p.partition_index), {})[node_id] = p.partition_size
    return sizes


def describe(args, admin) -> int:
    if args.names:
        topics = [admin.topic(n) for n in args.names]
    else:
        topics = sorted((t for t in admin.metadata(None).topics if t.error_code == 0), key=lambda t: t.name)
    for t in topics:
        t.partitions.sort(key=lambda p: p.partition_index)
    configs = describe_configs(admin, TOPIC_RESOURCE, [t.name for t in topics]) if topics else {}
    sizes = {} if args.no_sizes or not topics else partition_sizes(admin, topics)
    data = []
    for t in topics:
        parts = []
        for p in t.partitions:
            on = sizes.get((t.name, p.partition_index), {})
            parts.append({"partition": p.partition_index, "leader": p.leader_id, "leader_epoch": p.leader_epoch,
                          "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes),
                          "offline_replicas": list(p.offline_replicas),
                          "size_bytes": on.get(p.leader_id, max(on.values(), default=None))})
        data.append({"name": t.name, "topic_id": str(t.topic_id), "internal": t.is_internal,
                     "partition_count": len(parts),
                     "replication_factor": len(parts[0]["replicas"]) if parts else 0,
                     "partitions": parts, "configs": configs.get(t.name, [])})

    def render(data):
        for d in data:
            output.fields([("Topic", d["name"]), ("TopicId", d["topic_id"]),
                           ("PartitionCount", d["partition_count"]),
                           ("ReplicationFactor", d["replication_factor"])])
            output.table(d["partitions"], [("partition", "PARTITION"), ("leader", "LEADER"),
                                           ("replicas", "REPLICAS"), ("isr", "ISR"),
                                           ("offline_replicas", "OFFLINE"), ("size_bytes", "SIZE")])
            shown = [c for c in d["configs"] if args.all_configs or c["source"] != "DEFAULT_CONFIG"]
            if shown:
                output.table(shown, [("name", "CONFIG"), ("value", "VALUE"), ("source", "SOURCE")])
    output.emit(args, data, render)
    return 0


def delete(args, admin) -> int:
    conn = admin.bootstrap
    v = conn.version(DeleteTopicsRequest, 6)
    timeout_ms = int(admin.timeout * 1000)
    if v >= 6:
        req = DeleteTopicsRequest(timeout_ms=timeout_ms, topics=[
            DeleteTopicsRequest.DeleteTopicState(name=n) for n in args.names])
    else:
        req = DeleteTopicsRequest(timeout_ms=timeout_ms, topic_names=list(args.names))
    results, failure = [], None
    for r in conn.call(req, v).responses:
        if r.error_code == 3 and args.if_exists:
            results.append({"name": r.name, "deleted": False})
        elif r.error_code:
            failure = failure or KafkaError(r.error_code, f"topic {r.name}", r.error_message)
        else:
            results.append({"name": r.name, "deleted": True})
    output.emit(args, results, lambda rows: [print(
        f"{'Deleted' if r['deleted'] else 'No such'} topic {r['name']}.") for r in rows])
    if failure:
        raise failure
    return 0


def alter_config(args, admin) -> int:
    changes = [(k, 0, v) for k, v in _kv(args.set, "--set")] + [(k, 1, None) for k in args.delete]
    if not changes:
        raise AdminError("alter-config needs --set KEY=VALUE or --delete KEY", USAGE)
    req = IncrementalAlterConfigsRequest(validate_only=False, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=args.name, configs=[
                IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v)
                for k, op, v in changes])])
    for r in admin.call(req, 1).responses:
        check(r.error_code, f"topic {r.resource_name}", r.error_message)
    data = {"name": args.name, "set": dict(_kv(args.set, "--set")), "deleted": list(args.delete)}
    output.emit(args, data, lambda d: print(f"Completed updating config for topic {args.name}."))
    return 0


def add_partitions(args, admin) -> int:
    req = CreatePartitionsRequest(timeout_ms=int(admin.timeout * 1000), validate_only=False, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=args.name, count=args.count, assignments=None)])
    for r in admin.call(req, 3).results:
        check(r.error_code, f"topic {r.name}", r.error_message)
    _wait_for_leaders(admin, [args.name])
    output.emit(args, {"name": args.name, "partitions": args.count},
                lambda d: print(f"Topic {args.name} now has {args.count} partitions."))
    return 0
