"""Everything security keeps in the metadata log survives a restart: SCRAM
credentials, ACLs, client quotas and delegation tokens."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from kproto.messages.create_delegation_token_request import CreateDelegationTokenRequest
from kproto.messages.describe_delegation_token_request import DescribeDelegationTokenRequest
from tests.security_helpers import SecureBroker
from tests.test_security_acl import TOPIC_AUTH, create_topic, grant, login
from tests.test_security_quotas import alter, describe
from tests.wire_client import metadata
from broker.security.acls import TOPIC


def test_credentials_acls_quotas_and_tokens_survive_a_restart(tmp_path):
    b = SecureBroker(str(tmp_path / "data"), None, listeners=("SASL_PLAINTEXT",), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin", "delegation.token.secret.key": "secret"})
    b.start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        up = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw")
        admin.alter_user_scram_credentials([up], request_timeout=10)["carol"].result(timeout=15)
        create_topic(b.bootstrap, "kept")
        grant(b, TOPIC, "kept", "User:alice", "DESCRIBE")
        assert alter(b.bootstrap, {"user": "carol", "client-id": None}, {"consumer_byte_rate": 1000}) == (0, None)
        with login(b, "admin") as c:
            token_id = c.call(CreateDelegationTokenRequest(renewers=[], max_lifetime_ms=-1), 3).token_id
        b.restart()
        described = admin.describe_user_scram_credentials(["carol"], request_timeout=10)["carol"].result(timeout=15)
        assert [i.mechanism for i in described.scram_credential_infos] == [ScramMechanism.SCRAM_SHA_512]
        with login(b, "alice") as c:
            assert metadata(c, "kept").error_code == 0
        with login(b, "bob") as c:
            assert metadata(c, "kept").error_code == TOPIC_AUTH
        assert describe(b.bootstrap, [("user", 0, "carol")]) == {
            (("client-id", None), ("user", "carol")): {"consumer_byte_rate": 1000.0}}
        with login(b, "admin") as c:
            tokens = c.call(DescribeDelegationTokenRequest(owners=None), 3).tokens
        assert [t.token_id for t in tokens] == [token_id]
    finally:
        b.stop()
