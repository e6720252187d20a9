"""A transaction's marker for a `__consumer_offsets` partition whose groups are being loaded (a
new leader reading the partition, issue #30).

The group coordinator reads the partition up to the end it had when the load began. A COMMIT
marker appended while the load runs falls after that point, and its completion (the marker is
written: make the transaction's offsets visible) finds no group yet: the load then builds the
group with the transaction's offsets still pending, and nothing completes them any more (the
transaction is CompleteCommit). Their group answered UNSTABLE_OFFSET_COMMIT to every
require_stable OffsetFetch and showed the old offset to the others, for good; the producer's
next transaction that ends the other way would complete them wrongly.

kproto's partition leader now answers the marker NOT_LEADER_OR_FOLLOWER while the group
coordinator loads the partition, and the transaction coordinator retries it (as Kafka's
TransactionMarkerChannelManager retries markers until they are written) until after the load,
where its completion finds the group; Kafka's group coordinator runtime likewise refuses the
completion of a partition that is not loaded yet.

The test runs a real broker in this trio run; the load is made slow by replaying the partition
one batch at a time (as a large partition replays chunk by chunk) over a few hundred batches."""
from __future__ import annotations

import trio

from kproto.errors import ErrorCode as E

import broker.groups.coordinator as group_coordinator
from broker.controller.controller import TopicSpec
from broker.launch.embedded import open_trio_broker
from broker.metadata.internal_topics import OFFSETS_TOPIC
from broker.storage import replay
from broker.transactions.placement import TRANSACTION_STATE_TOPIC

TOPIC = "t"
TXN = "tx-loading"
GROUP = "g-loading"
SETTINGS = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
            "transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1"}


async def _until(check, what: str, timeout: float = 20):
    with trio.move_on_after(timeout):
        while True:
            value = await check()
            if value:
                return value
            await trio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _committed_offset_after_a_load_racing_the_marker(monkeypatch) -> tuple:
    async with open_trio_broker(settings=SETTINGS) as handle:
        broker = handle.broker
        broker.controller.create_topic(TopicSpec(TOPIC, 1))

        async def topics_ready():
            return (broker.groups.ensure_offsets_topic() == E.NONE
                    and broker.transactions.ensure_state_topic() == E.NONE
                    and not broker.groups.state.loading and not broker.transactions.state.loading)
        await _until(topics_ready, "the internal topics")

        async def init():
            res = await broker.transactions.init_producer_id(TXN, 60000)
            return res if res.error == E.NONE else None
        res = await _until(init, "a producer id")
        pid, epoch = res.producer_id, res.producer_epoch

        # other groups' commits: a few hundred batches for the load to read
        for i in range(300):
            out = await broker.groups.commit_offsets(group_id=f"other-{i}", member_id="", generation_id=-1,
                                                     offsets=[(TOPIC, 0, i, 0, "", -1)])
            assert set(out.errors.values()) == {E.NONE}

        assert await broker.transactions.add_partitions(TXN, pid, epoch, [(OFFSETS_TOPIC, 0)]) == E.NONE
        out = await broker.groups.txn_commit_offsets(group_id=GROUP, producer_id=pid, producer_epoch=epoch,
                                                     offsets=[(TOPIC, 0, 10, 0, "", -1)])
        assert out.errors == {(TOPIC, 0): E.NONE}

        # the partition is loaded again (as by a new leader), one batch per step
        monkeypatch.setattr(group_coordinator, "stored_batches",
                            lambda plog, end=None: replay.stored_batches(plog, end, chunk_bytes=1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.groups.partition_leadership, 0, True)
            while 0 not in broker.groups.state.loading:
                await trio.sleep(0)
            # the commit, while the load reads the partition
            assert await broker.transactions.end_txn(TXN, pid, epoch, True) == E.NONE
            assert 0 in broker.groups.state.loading, "the load ended before the commit's markers"

        async def completed():
            err, d = broker.transactions.describe(TXN)
            return err == E.NONE and d.state == "CompleteCommit" and not broker.groups.state.loading
        await _until(completed, "the commit to complete")
        assert TRANSACTION_STATE_TOPIC in broker.image.topics
        stable = broker.groups.fetch_offsets(GROUP, [(TOPIC, 0)], require_stable=True)[1][0][2]
        plain = broker.groups.fetch_offsets(GROUP, [(TOPIC, 0)])[1][0][2]
        return stable.error, stable.offset, plain.offset


def test_a_commit_marker_written_while_its_group_partition_loads_makes_the_offsets_visible(monkeypatch):
    error, stable, plain = trio.run(_committed_offset_after_a_load_racing_the_marker, monkeypatch)
    assert (error, stable, plain) == (E.NONE, 10, 10)
