"""Topic IDs in place of topic names (KIP-516 in Produce v13, KIP-848 in
OffsetCommit v10 and OffsetFetch v10): before authorization and the handler,
each request topic's id is resolved to its name (left empty for an id the
metadata does not know: the handler answers UNKNOWN_TOPIC_ID, as Kafka does
before it checks ACLs); after the handler, each response topic gets its id
from its name, so the handlers and the ACL checks keep working with names."""
from __future__ import annotations

from kproto._codec import ZERO_UUID
from kproto.api import ApiKey

# the first version of each API whose topics are named by id
FROM_VERSION = {int(ApiKey.PRODUCE): 13, int(ApiKey.OFFSET_COMMIT): 10, int(ApiKey.OFFSET_FETCH): 10}


def uses_ids(api_key: int, version: int) -> bool:
    first = FROM_VERSION.get(api_key)
    return first is not None and version >= first


def unknown(topic) -> bool:
    """A request topic whose id did not resolve (its name stayed empty)."""
    return not topic.name and topic.topic_id != ZERO_UUID


def _request_topics(api_key: int, req):
    if api_key == ApiKey.PRODUCE:
        return list(req.topic_data)
    if api_key == ApiKey.OFFSET_COMMIT:
        return list(req.topics)
    return [t for g in req.groups for t in (g.topics or [])]


def _response_topics(api_key: int, resp):
    if api_key == ApiKey.PRODUCE:
        return list(resp.responses)
    if api_key == ApiKey.OFFSET_COMMIT:
        return list(resp.topics)
    return [t for g in resp.groups for t in g.topics]


def resolve_request(broker, api_key: int, version: int, req) -> None:
    if not uses_ids(api_key, version) or getattr(broker, "image", None) is None:
        return
    by_id = broker.image.topics_by_id
    for t in _request_topics(api_key, req):
        image = by_id.get(t.topic_id)
        t.name = image.name if image is not None else ""


def fill_response(broker, api_key: int, version: int, resp) -> None:
    if resp is None or not uses_ids(api_key, version) or getattr(broker, "image", None) is None:
        return
    topics = broker.image.topics
    for t in _response_topics(api_key, resp):
        if t.topic_id == ZERO_UUID and t.name in topics:
            t.topic_id = topics[t.name].topic_id
