"""Every (API, version, request/response) pair: random valid instances encode
and decode back to equal objects, and re-encoding gives the same bytes."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from kproto.api import APIS, request_class, response_class
from tests.protocol_strategies import message

CASES = []
for key, (name, _rq, _rs, lo, hi, _f1, _f2) in sorted(APIS.items()):
    for version in range(lo, hi + 1):
        CASES.append(pytest.param(key, version, "request", id=f"{name}Request-v{version}"))
        CASES.append(pytest.param(key, version, "response", id=f"{name}Response-v{version}"))


def _normalise(obj):
    # records decode as memoryviews; compare as bytes
    return obj


@pytest.mark.parametrize("api_key,version,kind", CASES)
def test_round_trip(api_key, version, kind):
    cls = request_class(api_key) if kind == "request" else response_class(api_key)
    flexible = cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM

    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(message(cls, version, flexible))
    def check(msg):
        data = msg.encode(version)
        back = cls.decode(data, version)
        assert back == msg
        assert back.encode(version) == data

    check()
