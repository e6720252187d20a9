"""controller_mutation_rate (KIP-599) around CreateTopics, CreatePartitions
and DeleteTopics: every partition created or deleted is one mutation. New
request versions are strict (CreateTopics v6+, CreatePartitions v3+,
DeleteTopics v5+): once the principal's bucket is empty, the remaining
topics get THROTTLING_QUOTA_EXCEEDED; older versions are served and only
throttled. The throttle time is in the response and mutes the connection."""
from __future__ import annotations

import time

from kproto.api import ApiKey
from kproto.errors import ErrorCode as E

from broker.security.principal import ANONYMOUS
from broker.security.quotas import MutationQuotas, user_name

MESSAGE = "The throttling quota has been exceeded."
STRICT_FROM = {int(ApiKey.CREATE_TOPICS): 6, int(ApiKey.CREATE_PARTITIONS): 3, int(ApiKey.DELETE_TOPICS): 5}


def _mutations(ctx, api_key, item) -> int:
    image = ctx.broker.image
    if api_key == ApiKey.CREATE_TOPICS:
        if item.assignments:
            return len(item.assignments)
        return item.num_partitions if item.num_partitions > 0 else ctx.broker.config.get_int("num.partitions")
    if api_key == ApiKey.CREATE_PARTITIONS:
        t = image.topics.get(item.name)
        return max(item.count - len(t.partitions), 0) if t is not None else 0
    name = item if isinstance(item, str) else (item.name or getattr(
        image.topics_by_id.get(item.topic_id), "name", None))
    t = image.topics.get(name) if name else None
    return len(t.partitions) if t is not None else 0


async def run(mutation_quotas: MutationQuotas, ctx, req, handler):
    session = getattr(ctx.conn, "session", None)
    user = user_name(session.principal if session is not None else ANONYMOUS)
    found = mutation_quotas.bucket(user, ctx.client_id or "")
    if found is None:
        return await handler(ctx, req)
    bucket, rate, _burst = found
    key = ctx.api_key
    strict = ctx.api_version >= STRICT_FROM[key]
    attr = "topics" if key != ApiKey.DELETE_TOPICS or ctx.api_version >= 6 else "topic_names"
    items = list(getattr(req, attr) or [])
    kept, refused = [], []
    for item in items:
        if strict and bucket.tokens < 0:
            refused.append(item)
            continue
        bucket.tokens -= _mutations(ctx, key, item)
        kept.append(item)
    setattr(req, attr, kept)
    resp = await handler(ctx, req)
    throttle = MutationQuotas.throttle_ms(bucket, rate)
    if refused:
        _add_refusals(ctx, key, resp, refused)
    if throttle:
        resp.throttle_time_ms = max(resp.throttle_time_ms or 0, throttle)
        if session is not None:
            session.throttle_until = max(session.throttle_until or 0.0, time.monotonic() + throttle / 1000.0)
    return resp


def _add_refusals(ctx, key, resp, refused) -> None:
    from kproto._codec import ZERO_UUID
    if key == ApiKey.CREATE_TOPICS:
        from kproto.messages.create_topics_response import CreateTopicsResponse as R
        resp.topics = list(resp.topics) + [R.CreatableTopicResult(
            name=t.name, topic_id=ZERO_UUID, error_code=E.THROTTLING_QUOTA_EXCEEDED, error_message=MESSAGE,
            topic_config_error_code=0, num_partitions=-1, replication_factor=-1, configs=[]) for t in refused]
    elif key == ApiKey.CREATE_PARTITIONS:
        from kproto.messages.create_partitions_response import CreatePartitionsResponse as R
        resp.results = list(resp.results) + [R.CreatePartitionsTopicResult(
            name=t.name, error_code=E.THROTTLING_QUOTA_EXCEEDED, error_message=MESSAGE) for t in refused]
    else:
        from kproto.messages.delete_topics_response import DeleteTopicsResponse as R
        resp.responses = list(resp.responses) + [R.DeletableTopicResult(
            name=t if isinstance(t, str) else t.name, topic_id=ZERO_UUID if isinstance(t, str) else t.topic_id,
            error_code=E.THROTTLING_QUOTA_EXCEEDED, error_message=MESSAGE) for t in refused]
