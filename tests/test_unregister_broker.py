"""UnregisterBroker: unknown broker ids get Kafka's error; the live broker stays."""
from __future__ import annotations

import pytest

from kproto.errors import ErrorCode
from kproto.messages.unregister_broker_request import UnregisterBrokerRequest
from tests.wire_client import WireClient, api_versions_ok, metadata

pytestmark = pytest.mark.timeout(30)


def test_unregister_broker(broker):
    with WireClient(broker.bootstrap) as c:
        resp = c.call(UnregisterBrokerRequest(broker_id=7), 0)
        assert (resp.error_code, resp.error_message) == (ErrorCode.BROKER_ID_NOT_REGISTERED, "")
        resp = c.call(UnregisterBrokerRequest(broker_id=1), 0)
        assert resp.error_code == 0
        # the broker keeps serving (it is its own controller and registers again at once)
        assert api_versions_ok(c)
        assert metadata(c, "unregister-check", auto_create=True).error_code in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
