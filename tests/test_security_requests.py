"""SASL and ACL requests against a PLAINTEXT broker without an authorizer get
Kafka's answers (SECURITY_DISABLED, ILLEGAL_SASL_STATE), through a real client."""
from __future__ import annotations

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType)
from confluent_kafka import KafkaException

from kproto.messages.describe_acls_request import DescribeAclsRequest
from kproto.messages.sasl_handshake_request import SaslHandshakeRequest

from tests.wire_client import WireClient


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_describe_acls_reports_security_disabled(broker):
    with WireClient(broker.bootstrap) as client:
        req = DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                                  principal_filter=None, host_filter=None, operation=1, permission_type=1)
        resp = client.call(req, 3)
    assert resp.error_code == 54  # SECURITY_DISABLED
    assert resp.resources == []


def test_create_acls_reports_security_disabled(broker):
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin = _admin(broker)
    futs = admin.create_acls([binding], request_timeout=10)
    with pytest.raises(KafkaException) as exc:
        futs[binding].result(timeout=15)
    assert exc.value.args[0].code() == 54


def test_sasl_handshake_on_a_plaintext_listener_is_illegal_state(broker):
    with WireClient(broker.bootstrap) as client:
        resp = client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert resp.error_code == 34  # ILLEGAL_SASL_STATE
        assert not client.closed_by_peer(timeout=0.2)
