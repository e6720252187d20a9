"""The console's changes, only with `kproto.console.writes.enable=true`: create and delete a
topic, reset a consumer group's offsets to the earliest or latest (only while it has no members,
as Kafka requires). Each is a Kafka request made as the logged-in user, so the authorizer decides
(CREATE, DELETE, READ on the group); the error is shown with Kafka's name for it."""
from __future__ import annotations

from kproto.messages.create_topics_request import CreateTopicsRequest
from kproto.messages.delete_topics_request import DeleteTopicsRequest

from broker.admin import groups, topics
from broker.admin.errors import AdminError, check


def create_topic(admin, form: dict) -> str:
    name = form.get("name", "").strip()
    if not name:
        raise ValueError("a topic name is needed")
    partitions = int(form.get("partitions") or -1)
    replication = int(form.get("replication_factor") or -1)
    req = CreateTopicsRequest(timeout_ms=15000, validate_only=False, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication)])
    t = admin.call(req, 7).topics[0]
    check(t.error_code, f"topic {name}", t.error_message)
    topics._wait_for_leaders(admin, [name])
    return name


def delete_topic(admin, name: str, form: dict) -> None:
    if form.get("confirm") != name:
        raise ValueError("type the topic's name to confirm its deletion")
    conn = admin.bootstrap
    req = DeleteTopicsRequest(timeout_ms=15000, topics=[DeleteTopicsRequest.DeleteTopicState(name=name)])
    r = conn.call(req, 6).responses[0]
    check(r.error_code, f"topic {name}", r.error_message)


def reset_group(admin, group: str, form: dict) -> list[dict]:
    to = form.get("to", "")
    if to not in ("earliest", "latest"):
        raise ValueError("reset to earliest or latest")
    conn = admin.coordinator(group)
    committed = groups.committed_offsets(admin, group, conn)
    if not committed:
        raise AdminError(f"GROUP_ID_NOT_FOUND (group {group}): no committed offsets to reset")
    plan = groups.reset_plan(admin, conn, group, {t: sorted(ps) for t, ps in committed.items()}, to)
    groups.commit_plan(conn, group, plan)
    return plan
