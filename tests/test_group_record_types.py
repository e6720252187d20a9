"""The KIP-848 and share-group record types are written as numbers where their codecs are imported
lazily (broker/groups/consumer_records.py, share_records.py, share_metadata.py, loading.py): each
number must be the API_KEY of the codec Kafka's definitions give it, and the replay's share-group
branch must start at the lowest share-group type."""
from __future__ import annotations

from broker.groups import consumer_records, loading, share_metadata, share_records


def test_each_record_type_is_its_codecs_api_key():
    for module in (consumer_records, share_records):
        keys, values = module.codecs()
        assert keys.keys() == values.keys() == module._KINDS
        for kind in module._KINDS:
            assert keys[kind].API_KEY == kind == values[kind].API_KEY, (module.__name__, kind)
    key, value = share_metadata._codecs()
    assert key.API_KEY == share_metadata.KEY_TYPE == value.API_KEY


def test_the_replay_sends_every_share_group_type_and_no_consumer_group_type_to_the_share_branch():
    share_types = set(share_records._KINDS) | {share_metadata.KEY_TYPE}
    assert min(share_types) == loading._FIRST_SHARE_TYPE
    assert max(consumer_records._KINDS) < loading._FIRST_SHARE_TYPE
