"""broker/metadata/delta.py: what a run of metadata records names for the broker's reconcile.
Pure: no processes."""
from __future__ import annotations

from types import SimpleNamespace

from broker.metadata.delta import PartitionDelta


class PartitionRecord(SimpleNamespace):
    pass


class RemoveTopicRecord(SimpleNamespace):
    pass


def _image(**topics):
    return SimpleNamespace(topics_by_id={tid: SimpleNamespace(name=name) for name, tid in topics.items()})


def test_the_named_partitions_come_in_the_records_order():
    # the reconcile makes new logs in this order, which places them across log dirs (each new
    # log to the dir with the fewest): partition 0 first, as a full walk of the image does
    image = _image(orders="id-1", pay="id-2")
    delta = PartitionDelta(node_id=1)
    delta.take()                             # (the first reconcile walks everything)
    order = [3, 0, 2, 1] + list(range(4, 40))
    delta.add([PartitionRecord(topic_id="id-1", partition_id=i) for i in order]
              + [PartitionRecord(topic_id="id-2", partition_id=0),
                 PartitionRecord(topic_id="id-1", partition_id=0)], image)   # (named twice)
    assert list(delta.take()) == [("orders", i) for i in order] + [("pay", 0)]
    assert list(delta.take()) == []
    delta.add([RemoveTopicRecord(topic_id="id-2")], image)
    assert delta.take() is None               # a record naming more than partitions: every one
