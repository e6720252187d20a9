"""What each console page shows, as plain data, fetched through a broker/admin client: lists are
filtered and paginated here, so a page on a 10,000-partition cluster carries one page of rows
(sizes, offsets and lag are asked only for the rows shown)."""
from __future__ import annotations

from kproto.messages.fetch_request import FetchRequest
from kproto.messages.list_groups_request import ListGroupsRequest

from broker.admin import cluster_info, groups, topics
from broker.admin.client import EARLIEST, LATEST
from broker.admin.consume import data_records, decode
from broker.admin.errors import AdminError, check

PAGE_SIZE = 50


def page_of(rows: list, page: int, size: int = PAGE_SIZE) -> dict:
    pages = max(1, (len(rows) + size - 1) // size)
    page = min(max(1, page), pages)
    return {"rows": rows[(page - 1) * size:page * size], "page": page, "pages": pages, "total": len(rows)}


def overview(admin) -> dict:
    md = admin.metadata(None)
    alive = {b.node_id for b in md.brokers}
    offline, under = [], []
    for t in md.topics:
        for p in t.partitions:
            if p.leader_id < 0:
                offline.append(f"{t.name}-{p.partition_index}")
            if len(p.isr_nodes) < len(p.replica_nodes):
                under.append(f"{t.name}-{p.partition_index}")
    q = cluster_info.describe_quorum(admin)
    quorum = None
    if q is not None:
        quorum = {"leader_id": q.leader_id, "leader_epoch": q.leader_epoch, "high_watermark": q.high_watermark,
                  "voters": [{"id": r.replica_id, "log_end_offset": r.log_end_offset,
                              "lag": max(0, q.high_watermark - r.log_end_offset)} for r in q.current_voters],
                  "observers": [{"id": r.replica_id, "log_end_offset": r.log_end_offset,
                                 "lag": max(0, q.high_watermark - r.log_end_offset)} for r in q.observers]}
    return {"cluster_id": md.cluster_id, "controller_id": q.leader_id if q is not None else md.controller_id,
            "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in sorted(md.brokers, key=lambda b: b.node_id)],
            "topics": len(md.topics), "partitions": sum(len(t.partitions) for t in md.topics),
            "offline": sorted(offline), "under_replicated": sorted(under), "quorum": quorum,
            "brokers_down": sorted({r for t in md.topics for p in t.partitions for r in p.replica_nodes} - alive)}


def topic_list(admin, query: str, page: int) -> dict:
    rows = []
    for t in sorted(admin.metadata(None).topics, key=lambda t: t.name):
        if t.error_code or (query and query.lower() not in t.name.lower()):
            continue
        rows.append({"name": t.name, "partitions": len(t.partitions), "internal": t.is_internal,
                     "replication_factor": len(t.partitions[0].replica_nodes) if t.partitions else 0,
                     "under_replicated": sum(len(p.isr_nodes) < len(p.replica_nodes) for p in t.partitions),
                     "offline": sum(p.leader_id < 0 for p in t.partitions)})
    return page_of(rows, page)


def topic_detail(admin, name: str, page: int) -> dict:
    t = admin.topic(name)
    shown = page_of(t.partitions, page, 100)
    t.partitions = shown["rows"]
    sizes = topics.partition_sizes(admin, [t])
    ends = admin.list_offsets(name, {p.partition_index: 0 for p in t.partitions}, LATEST)
    starts = admin.list_offsets(name, {p.partition_index: 0 for p in t.partitions}, EARLIEST)
    rows = []
    for p in t.partitions:
        on = sizes.get((name, p.partition_index), {})
        rows.append({"partition": p.partition_index, "leader": p.leader_id, "replicas": list(p.replica_nodes),
                     "isr": list(p.isr_nodes), "offline": list(p.offline_replicas),
                     "size": on.get(p.leader_id, max(on.values(), default=None)),
                     "start": starts.get(p.partition_index), "end": ends.get(p.partition_index)})
    try:
        configs = topics.describe_configs(admin, topics.TOPIC_RESOURCE, [name]).get(name, [])
    except AdminError:   # may describe the topic, may not read its configs (DESCRIBE_CONFIGS)
        configs = None
    shown["rows"] = rows
    return {"name": name, "topic_id": str(t.topic_id), "partitions": shown, "configs": configs}


def messages(admin, topic: str, partition: int, offset: int | None, timestamp: int | None, limit: int,
             how: str) -> dict:
    """Up to `limit` records of one partition from an offset (default: the last `limit`) or the
    first at or after a timestamp."""
    t = admin.topic(topic)
    leaders = {p.partition_index: p.leader_id for p in t.partitions}
    if partition not in leaders:
        raise AdminError(f"UNKNOWN_TOPIC_OR_PARTITION: {topic} has no partition {partition}")
    start = admin.list_offsets(topic, {partition: 0}, EARLIEST)[partition]
    end = admin.list_offsets(topic, {partition: 0}, LATEST)[partition]
    if timestamp is not None:
        found = admin.list_offsets(topic, {partition: 0}, timestamp)[partition]
        offset = end if found < 0 else found
    elif offset is None:
        offset = max(start, end - limit)
    offset = max(offset, start)
    records, position = [], offset
    for _ in range(20):   # a few fetches at most: a page is small
        if len(records) >= limit or position >= end:
            break
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchPartition(partition=partition, current_leader_epoch=-1,
                                                           fetch_offset=position, partition_max_bytes=1 << 20)])])
        rp = admin.node(leaders[partition]).call(req, 12).responses[0].partitions[0]
        check(rp.error_code, f"{topic}-{partition}")
        got = False
        for rec in data_records(rp.records, position):
            records.append({"offset": rec.offset, "timestamp": rec.timestamp, "key": decode(rec.key, how),
                            "value": decode(rec.value, how),
                            "headers": [(k, decode(v, how)) for k, v in rec.headers]})
            position = rec.offset + 1
            got = True
            if len(records) >= limit:
                break
        if not got:
            break
    return {"topic": topic, "partition": partition, "partitions": sorted(leaders), "offset": offset,
            "start": start, "end": end, "records": records, "next": position, "decode": how, "limit": limit}


def group_list(admin, query: str, page: int) -> dict:
    found = {}
    for node_id in sorted(admin.brokers()):
        resp = admin.node(node_id).call(ListGroupsRequest(states_filter=[]), 4)
        check(resp.error_code, "ListGroups")
        for g in resp.groups:
            if not query or query.lower() in g.group_id.lower():
                found[g.group_id] = {"group": g.group_id, "state": g.group_state, "protocol_type": g.protocol_type}
    return page_of([found[g] for g in sorted(found)], page)


def group_detail(admin, group: str, page: int) -> dict:
    d = groups.describe_group(admin, group)
    d["offsets"] = page_of(d["offsets"], page, 100)
    return d
