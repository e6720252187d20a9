"""Conformance probe: every API version the broker serves answers a minimal
well-formed request with a well-formed response of that version.

For each (API, version) in the handler registry (what ApiVersions
advertises, conditional APIs included) the probe sends a request built from
the codec's defaults (with a few fields set where a default would not be a
valid request), on a connection of its own, and checks that the broker
answers (no closed connection), that the answer decodes as that version's
response with nothing left over, and that no error code in it is
UNKNOWN_SERVER_ERROR.
"""
from __future__ import annotations


import pytest

from kproto import api
from kproto.errors import ErrorCode
from tests.wire_client import WireClient

pytestmark = pytest.mark.timeout(120)

PROBE_GROUP = "probe-group"
PROBE_TOPIC = "probe-topic"


def _served() -> dict[int, tuple[int, int]]:
    from broker.handlers import load_all
    return {k: (lo, hi) for k, (lo, hi, _fn) in load_all().items()}


def _pairs():
    return [(k, v) for k, (lo, hi) in sorted(_served().items()) for v in range(lo, hi + 1)]


# fields a default-built request would leave invalid enough to get no answer at all
# (acks=0) or to wait (fetch max wait); everything else is the codec's default
def _adjust(api_key: int, version: int, req) -> None:
    name = api.APIS[api_key][0]
    if name == "Produce":
        req.acks = 1
    elif name == "Fetch":
        req.max_wait_ms = 0
        req.replica_id = -1
    elif name in ("ApiVersions",):
        req.client_software_name, req.client_software_version = "probe", "1.0"
    for attr, value in (("group_id", PROBE_GROUP), ("timeout_ms", 1000), ("session_timeout_ms", 10000),
                        ("rebalance_timeout_ms", 10000), ("protocol_type", "consumer")):
        if _present(req, attr, version) and getattr(req, attr) in ("", 0, None):
            setattr(req, attr, value)


def _present(msg, attr: str, version: int) -> bool:
    for entry in getattr(msg, "_schema", ()):
        if entry[0] == attr:
            lo, hi = entry[3]
            return lo <= version and (hi is None or version <= hi)
    return False


def _error_codes(obj, path="response"):
    """(path, code) of every error code field, at any depth."""
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            yield from _error_codes(item, f"{path}[{i}]")
        return
    for field in getattr(obj, "_fields", ()):
        value = getattr(obj, field)
        if field.endswith("error_code") and isinstance(value, int):
            yield f"{path}.{field}", value
        elif isinstance(value, list) or hasattr(value, "_fields"):
            yield from _error_codes(value, f"{path}.{field}")


def probe(bootstrap: str, api_key: int, version: int, timeout: float = 10.0) -> str | None:
    """None if (api_key, version) is answered well; else what went wrong."""
    req = api.request_class(api_key)()
    _adjust(api_key, version, req)
    try:
        frame = api.encode_request(req, version, 99, "probe")
    except Exception as exc:   # the probe's own request cannot be built: a probe bug
        return f"request not encodable: {exc!r}"
    with WireClient(bootstrap, timeout=timeout) as c:
        c.send_raw(frame)
        try:
            body = c.recv_frame()
        except TimeoutError:
            return f"no answer within {timeout} s"
    if body is None:
        return "connection closed instead of an answer"
    try:
        mv = memoryview(body)
        header, pos = api.ResponseHeader.decode_from(mv, 0, api.response_header_version(api_key, version))
        resp, end = api.response_class(api_key).decode_from(mv, pos, version)
    except Exception as exc:
        return f"response does not decode as v{version}: {exc!r}"
    if header.correlation_id != 99:
        return f"correlation id {header.correlation_id}"
    if end != len(body):
        return f"{len(body) - end} bytes left after the v{version} response"
    bad = [p for p, code in _error_codes(resp) if code == ErrorCode.UNKNOWN_SERVER_ERROR]
    if bad:
        return f"UNKNOWN_SERVER_ERROR in {', '.join(bad)}"
    return None


def test_every_served_version_answers(broker):
    failures = {}
    for key, version in _pairs():
        problem = probe(broker.bootstrap, key, version)
        if problem:
            failures[f"{api.APIS[key][0]} v{version}"] = problem
    assert not failures, failures
    assert len(_pairs()) > 200


def test_probe_detects_a_broken_answer(broker, monkeypatch):
    # the probe must fail when the broker answers with another version's layout
    from kproto.api import ApiKey
    original = api.response_header_version
    monkeypatch.setattr(api, "response_header_version",
                        lambda k, v: 1 - original(k, v) if k == ApiKey.METADATA else original(k, v))
    assert probe(broker.bootstrap, ApiKey.METADATA, 12) is not None
    monkeypatch.undo()
    assert probe(broker.bootstrap, ApiKey.METADATA, 12) is None
