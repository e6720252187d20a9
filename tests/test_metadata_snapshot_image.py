"""A metadata snapshot (broker/metadata/snapshotter.py) rebuilds the whole image: broker
registrations with their fenced / controlled-shutdown state (Metadata's offline replicas and the
controller's elections read them), client quotas, ACLs, SCRAM credentials and delegation tokens,
besides topics, partitions and configs."""
from __future__ import annotations

import uuid

from kproto.metadata.access_control_entry_record import AccessControlEntryRecord
from kproto.metadata.broker_registration_change_record import BrokerRegistrationChangeRecord
from kproto.metadata.client_quota_record import ClientQuotaRecord, EntityData
from kproto.metadata.delegation_token_record import DelegationTokenRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.register_broker_record import BrokerEndpoint, RegisterBrokerRecord
from kproto.metadata.topic_record import TopicRecord
from kproto.metadata.user_scram_credential_record import UserScramCredentialRecord

from broker.metadata.image import MetadataImage
from broker.metadata import snapshotter as metadata_snapshots, snapshots


def _state(image):
    brokers = {b: (r.incarnation_id, r.broker_epoch, [(e.name, e.host, e.port) for e in r.end_points], r.rack,
                   r.fenced, r.in_controlled_shutdown) for b, r in image.brokers.items()}
    topics = {n: (t.topic_id, {i: vars(p) for i, p in t.partitions.items()}, t.configs) for n, t in image.topics.items()}
    return (brokers, topics, image.client_quotas, image.acls, image.scram,
            {k: (v.owner, v.expiration_timestamp) for k, v in image.delegation_tokens.items()})


def test_a_snapshot_rebuilds_registrations_and_security_state():
    image = MetadataImage()
    tid = uuid.uuid4()
    image.apply(TopicRecord(name="t", topic_id=tid))
    image.apply(PartitionRecord(partition_id=0, topic_id=tid, replicas=[1, 2, 3], isr=[2, 3], leader=2,
                                leader_epoch=4, partition_epoch=7, removing_replicas=[], adding_replicas=[],
                                directories=[], leader_recovery_state=0))
    for b in (1, 2, 3):
        image.apply(RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=10 * b,
                                         end_points=[BrokerEndpoint(name="PLAINTEXT", host="h", port=9000 + b,
                                                                    security_protocol=0)],
                                         features=[], rack="r1" if b == 1 else None, fenced=False))
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, in_controlled_shutdown=1))
    image.apply(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=1))
    image.apply(ClientQuotaRecord(entity=[EntityData(entity_type="user", entity_name="alice")],
                                  key="producer_byte_rate", value=1024.0, remove=False))
    image.apply(AccessControlEntryRecord(id=uuid.uuid4(), resource_type=2, resource_name="t", pattern_type=3,
                                         principal="User:alice", host="*", operation=3, permission_type=3))
    image.apply(UserScramCredentialRecord(name="alice", mechanism=1, salt=b"s", stored_key=b"k",
                                          server_key=b"v", iterations=4096))
    image.apply(DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=[], issue_timestamp=1,
                                      max_timestamp=3, expiration_timestamp=2, token_id="tok"))
    data = snapshots.encode(metadata_snapshots.image_records(image, 21, 1), last_contained_timestamp=0)
    rebuilt = MetadataImage()
    for r in snapshots.decode(data).records:
        rebuilt.apply(r)
    assert _state(rebuilt) == _state(image)
    assert rebuilt.brokers[1].fenced and rebuilt.brokers[1].in_controlled_shutdown
    assert not rebuilt.brokers[2].fenced
