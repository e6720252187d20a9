"""kafka-python 3.x transactions with send_offsets_to_transaction: a
committed transaction's offset stays, an aborted one's does not, and the
client returns (against Kafka 3.9 the same script prints the same offsets).

A partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION from
TxnOffsetCommit on Kafka 3.9 and kproto alike, and kafka-python retries
that forever: its own integration tests expect topics of 4 partitions
(`kproto serve --set num.partitions=4`)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

kafka = pytest.importorskip("kafka")


def test_offsets_of_aborted_transaction_are_dropped(broker, topic_name):
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    group = f"g-{topic_name}"
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic_name}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic_name, b"x", partition=0)
        p.send_offsets_to_transaction({TopicPartition(topic_name, 0): OffsetAndMetadata(10, "", -1)}, group)
        p.commit_transaction()
        p.begin_transaction()
        p.send_offsets_to_transaction({TopicPartition(topic_name, 1): OffsetAndMetadata(20, "", -1)}, group)
        p.abort_transaction()
        committed = admin.list_group_offsets(group)[group]
    finally:
        p.close(timeout=5)
        admin.close()
    assert {tp.partition: o.offset for tp, o in committed.items()} == {0: 10}
