"""A compacted topic refuses records without a key, as Kafka does
(LogValidator.validateKey: INVALID_RECORD with a record error per keyless
record); keyed records, and keyless ones on other topics, are stored."""
from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kproto import records as rec
from tests.wire_client import WireClient, produce


def _create(broker, name: str, configs: dict) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(15)


def test_keyless_record_on_compacted_topic_is_invalid(broker):
    _create(broker, "compacted-keys", {"cleanup.policy": "compact"})
    with WireClient(broker.bootstrap) as client:
        refused = produce(client, "compacted-keys",
                          rec.build_batch([(b"k1", b"v1"), (None, b"no key"), (b"k2", b"v2")]))
        assert refused.error_code == 87  # INVALID_RECORD
        assert [e.batch_index for e in refused.record_errors] == [1]
        assert "Compacted topic cannot accept message without key in topic partition compacted-keys-0" in \
            refused.record_errors[0].batch_index_error_message
        stored = produce(client, "compacted-keys", rec.build_batch([(b"k1", b"v1"), (b"k2", b"v2")]))
        assert stored.error_code == 0 and stored.base_offset == 0  # the refused batch left nothing


def test_keyless_records_through_librdkafka(broker):
    _create(broker, "compacted-keys-rdk", {"cleanup.policy": "compact,delete"})
    _create(broker, "plain-keys-rdk", {})
    results = {}

    def report(err, msg):
        results[msg.topic()] = err

    p = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    p.produce("compacted-keys-rdk", value=b"no key", on_delivery=report)
    p.produce("plain-keys-rdk", value=b"no key", on_delivery=report)
    assert p.flush(15) == 0
    assert results["compacted-keys-rdk"] is not None
    assert results["compacted-keys-rdk"].code() == 87
    assert results["plain-keys-rdk"] is None
