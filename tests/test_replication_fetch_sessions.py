"""Followers replicate through incremental fetch sessions (KIP-227), as
Kafka's replica fetchers do: after one full fetch the leader keeps the
follower's partitions in a (privileged) session, the follower names only
partitions whose fetch position moved, and the leader answers only
partitions with news; when the leader loses the session the follower falls
back to a full fetch and replication goes on. Three brokers and a
controller in one process (tools/replication_cluster.py)."""
from __future__ import annotations

import trio

from broker.partitions import fetch_sessions
from broker.controller.controller import TopicSpec
from tools.replication_cluster import run_with_cluster

FAST = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
        "replica.fetch.backoff.ms": "100"}
PARTITIONS = 20


def _run(fn):
    run_with_cluster(fn, 4, FAST, controller=4, timeout=120)   # (generous: a loaded machine)


def _create(cluster, name="s"):
    c = cluster.brokers[cluster.controller].controller
    return c.create_topic(TopicSpec(name, -1, -1, {"min.insync.replicas": "2"},
                                    assignments=[(i, [2, 3, 1]) for i in range(PARTITIONS)])).topic_id


async def _leader_has_s0(cluster) -> None:
    # (more than 16 new partitions: the logs are made after the metadata change, and a produce
    # before the leader's log of s-0 exists is answered NOT_LEADER_OR_FOLLOWER, as Kafka's)
    await cluster.wait_for(lambda: cluster.brokers[2].partitions.get("s", 0) is not None,
                           what="the leader's log of s-0")


def _follower_sessions(cluster, leader=2):
    cache = getattr(cluster.brokers[leader], "fetch_sessions", None)
    if cache is None:
        return []
    return [s for shard in cache.shards for s in shard.sessions.values() if s.privileged]


def _answers_recorder(monkeypatch):
    """The partitions of every incremental answer to a follower (partition indexes)."""
    seen = []
    original = fetch_sessions.FetchSessionCache.finish

    def finish(self, context, entries):
        code, sid, out = original(self, context, entries)
        if context.kind == "incremental" and context.session.privileged:
            seen.append(sorted(e[0][1] for e in out))
        return code, sid, out
    monkeypatch.setattr(fetch_sessions.FetchSessionCache, "finish", finish)
    return seen


async def _idle_sessions(cluster, many: int) -> list:
    """Topic s of ``many`` partitions led by broker 2, its two followers' sessions idle: their
    fetchers."""
    c = cluster.brokers[cluster.controller].controller
    c.create_topic(TopicSpec("s", -1, -1, {"min.insync.replicas": "2"},
                             assignments=[(i, [2, 3, 1]) for i in range(many)]))
    await cluster.wait_for(lambda: sorted(len(s.partitions) for s in _follower_sessions(cluster)) == [many] * 2,
                           what="two follower sessions of every partition")
    fetchers = [cluster.brokers[n].replication.fetchers[2] for n in (1, 3)]
    await cluster.wait_for(lambda: all(f.session.epoch > 3 for f in fetchers), what="incremental fetches")
    await trio.sleep(0.3)
    return fetchers


async def _replicated(cluster, offset):
    for n in (1, 3):
        await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("s", 0).log.log_end_offset == offset,
                               what=f"broker {n} at {offset}")


def test_followers_fetch_incrementally_and_answers_carry_only_news(monkeypatch):
    # (one cluster for several checks: each start costs seconds)
    seen = _answers_recorder(monkeypatch)

    async def body(cluster, client):
        _create(cluster)
        # one session per follower, holding all the partitions it follows (the logs are made in
        # slices: a follower's first fetch may name the first slice only, the next ones add the rest)
        await cluster.wait_for(lambda: sorted(len(s.partitions) for s in _follower_sessions(cluster))
                               == [PARTITIONS, PARTITIONS], what="two follower sessions of every partition")
        assert len(_follower_sessions(cluster)) == 2
        await _leader_has_s0(cluster)
        for i in range(10):
            r = await client.produce(2, "s", [b"v%d" % i])
            assert r.error_code == 0, r
        await _replicated(cluster, 10)
        # both followers moved on incrementally: their session epochs went up, no new session
        fetchers = [cluster.brokers[n].replication.fetchers[2] for n in (1, 3)]
        assert all(f.session.session_id != 0 and f.session.epoch > 10 for f in fetchers)
        assert len(_follower_sessions(cluster)) == 2
        # idle partitions 1..19 came once (the session's first incremental answer: their high
        # watermark was new to it) and never again; afterwards answers carry partition 0 or nothing
        busy = [p for p in seen if p]
        assert busy and all(p == [0] for p in busy[-10:]), busy[-12:]
        assert sum(1 for p in busy if p != [0]) <= 4, busy
        # idle (the followers know the high watermark), the long polls end with nothing new: empty answers
        await cluster.wait_for(lambda: all(cluster.brokers[n].partitions.get("s", 0).replicated_hw == 10
                                           for n in (1, 3)), what="high watermark at the followers")
        await trio.sleep(0.2)
        n = len(seen)
        await trio.sleep(0.6)
        assert len(seen) > n and not any(seen[n:]), seen[n:]
        # partitions created later join the same sessions (added by incremental fetches)
        ids = {s.id for s in _follower_sessions(cluster)}
        c = cluster.brokers[cluster.controller].controller
        for k in range(3):
            c.create_topic(TopicSpec(f"later{k}", -1, -1, {"min.insync.replicas": "2"},
                                     assignments=[(0, [2, 3, 1])]))
            await cluster.wait_for(lambda k=k: ("later%d" % k, 0) in cluster.brokers[2].replication.leaders,
                                   what="leadership")
            for i in range(3):
                r = await client.produce(2, f"later{k}", [b"x%d" % i])
                assert r.error_code == 0 and r.base_offset == i, r
            for n in (1, 3):
                await cluster.wait_for(lambda n=n, k=k: cluster.brokers[n].partitions.get(
                    f"later{k}", 0).log.log_end_offset == 3, what=f"later{k} on broker {n}")
        assert {s.id for s in _follower_sessions(cluster)} == ids
        assert sorted(len(s.partitions) for s in _follower_sessions(cluster)) == [PARTITIONS + 3] * 2
    _run(body)


def test_a_high_watermark_move_alone_does_not_end_a_followers_long_poll():
    # with acks=all the high watermark moves at the second follower's fetch after each produce.
    # Waking the first follower's long poll for it cost a fetch and an answer without records
    # more per produce (3 follower fetches a produce, not 2); Kafka's DelayedFetch completes a
    # follower's fetch on new records, not on the high watermark, which the follower learns with
    # the next records or when its wait ends. Long polls of 1 s: a few end within the produces.
    async def body(cluster, client):
        c = cluster.brokers[cluster.controller].controller
        c.create_topic(TopicSpec("w", -1, -1, {"min.insync.replicas": "2"}, assignments=[(0, [2, 3, 1])]))
        await cluster.wait_for(lambda: ("w", 0) in cluster.brokers[2].replication.leaders, what="leadership")
        r = await client.produce(2, "w", [b"first"])
        assert r.error_code == 0, r
        fetchers = [cluster.brokers[n].replication.fetchers[2] for n in (1, 3)]
        await cluster.wait_for(lambda: all(f.session.epoch > 1 for f in fetchers), what="follower sessions")
        epochs, ids = [f.session.epoch for f in fetchers], [f.session.session_id for f in fetchers]
        n = 20
        for i in range(n):
            r = await client.produce(2, "w", [b"v%d" % i])   # acks=all
            assert r.error_code == 0 and r.base_offset == i + 1, r
        fetches = sum(f.session.epoch for f in fetchers) - sum(epochs)
        assert [f.session.session_id for f in fetchers] == ids   # (epochs count the same sessions' fetches)
        assert fetches <= 2 * n + 6, fetches
        # the followers still learn the high watermark (a consumer may read from them, KIP-392)
        await cluster.wait_for(lambda: all(cluster.brokers[b].partitions.get("w", 0).high_watermark == n + 1
                                           for b in (1, 3)), what="high watermark at the followers")
    run_with_cluster(body, 4, {**FAST, "replica.fetch.wait.max.ms": "1000"}, controller=4, timeout=120)


def test_follower_falls_back_to_a_full_fetch_when_the_leader_lost_the_session():
    async def body(cluster, client):
        _create(cluster)
        await cluster.wait_for(lambda: len(_follower_sessions(cluster)) == 2, what="two follower sessions")
        before = {s.id for s in _follower_sessions(cluster)}
        await _leader_has_s0(cluster)
        r = await client.produce(2, "s", [b"a"])
        assert r.error_code == 0
        await _replicated(cluster, 1)
        # the leader forgets every session (as after a restart): the followers' next
        # incremental fetch gets FETCH_SESSION_ID_NOT_FOUND, then a full fetch makes a new one
        cluster.brokers[2].fetch_sessions = None
        await cluster.wait_for(lambda: len(_follower_sessions(cluster)) == 2, what="new follower sessions")
        assert not before & {s.id for s in _follower_sessions(cluster)}
        for i in range(5):
            r = await client.produce(2, "s", [b"b%d" % i])
            assert r.error_code == 0, r
        await _replicated(cluster, 6)
        values, hw = await client.read_all(2, cluster.brokers[2].image.topics["s"].topic_id)
        assert values == [b"a"] + [b"b%d" % i for i in range(5)] and hw == 6
    _run(body)



def test_idle_followers_fetches_look_only_at_what_changed(monkeypatch):
    # 300 idle partitions: an idle follower's fetch used to visit every partition of its session
    # on both sides (the follower building its request, the leader reading the session twice per
    # long poll). Counted here as reads of a partition's log start offset, which both sides make
    # per partition visited: now only partitions that changed are looked at.
    from broker.partitions.partition import Partition
    many = 300
    reads = [0]
    original = Partition.replication_log_start_offset

    def counted(self):
        reads[0] += 1
        return original.fget(self)
    monkeypatch.setattr(Partition, "replication_log_start_offset", property(counted))

    async def body(cluster, client):
        fetchers = await _idle_sessions(cluster, many)
        epochs, before = [f.session.epoch for f in fetchers], reads[0]
        await trio.sleep(1.5)
        fetches = sum(f.session.epoch for f in fetchers) - sum(epochs)
        work = reads[0] - before
        # at least 10 idle fetches (100 ms long polls): 3 visits of 300 partitions each before
        # (the follower's request, the leader's two reads); now nothing changed, nothing is visited
        # (one full visit a minute at most: 900)
        # (and still long polls: at most one 100 ms wait per fetch, less on a busy machine)
        assert 10 <= fetches <= 2 * 1.5 / 0.1 + 4, fetches
        assert work <= 3 * many, (work, fetches)
        # what changes is still replicated, and acks=all completes
        for i in (0, 7, many - 1):
            r = await client.produce(2, "s", [b"x%d" % i], partition=i)   # acks=all
            assert r.error_code == 0, r
        for n in (1, 3):
            for i in (0, 7, many - 1):
                await cluster.wait_for(lambda n=n, i=i: cluster.brokers[n].partitions.get("s", i).log.log_end_offset == 1,
                                       what=f"s-{i} on broker {n}")
        # a follower gone stops counting as caught up where data arrives (ISR shrink after the lag time)
        cluster.kill(3)
        r = await client.produce(2, "s", [b"y"])
        assert r.error_code == 0, r
        state = cluster.brokers[2].replication.leaders[("s", 0)]
        await cluster.wait_for(lambda: 3 not in state.isr, what="broker 3 out of s-0's ISR")
    _run(body)


def test_a_metadata_change_visits_only_the_partitions_it_names(monkeypatch):
    # Every metadata change gave every hosted partition its role again (O(partitions) per commit:
    # tens of ms per change at 10,000 partitions, and a leadership change is several commits).
    # Now a broker visits the partitions the change's records name (broker/metadata/delta.py).
    from broker.replication.manager import ReplicationManager
    many = 300
    visits: dict = {}
    original = ReplicationManager._apply_role

    def counted(self, part, p, may_lead):
        visits[self.node_id] = visits.get(self.node_id, 0) + 1
        return original(self, part, p, may_lead)
    monkeypatch.setattr(ReplicationManager, "_apply_role", counted)

    async def body(cluster, client):
        c = cluster.brokers[cluster.controller].controller
        c.create_topic(TopicSpec("s", -1, -1, {}, assignments=[(i, [2, 3, 1]) for i in range(many)]))
        await cluster.wait_for(lambda: sorted(len(s.partitions) for s in _follower_sessions(cluster)) == [many] * 2,
                               what="two follower sessions of every partition")
        before = dict(visits)
        c.create_topic(TopicSpec("t", -1, -1, {}, assignments=[(0, [1, 2, 3])]))
        await cluster.wait_for(lambda: cluster.brokers[2].replication.fetchers.get(1) is not None
                               and ("t", 0) in cluster.brokers[2].replication.fetchers[1].partitions,
                               what="broker 2 following t-0")
        for n in (1, 2, 3):
            # t-0's role (once per reconcile of the change, at most a few), not the 300 of s again
            assert visits.get(n, 0) - before.get(n, 0) <= 5, (n, visits, before)
        # and what a change names still takes effect: t-0 led by broker 1, replicated
        r = await client.produce(1, "t", [b"x"])
        assert r.error_code == 0, r
        await cluster.wait_for(lambda: cluster.brokers[3].partitions.get("t", 0).log.log_end_offset == 1,
                               what="t-0 on broker 3")
    _run(body)


def test_a_full_visit_of_an_idle_session_looks_at_each_partition_once(monkeypatch):
    # The safety-net visit of every partition of a follower's session (FULL_VISIT_MS, made every
    # fetch here) looked at each partition twice, before and after the long poll, and made each
    # caught-up one a waiter of the long poll: at 10,000 partitions most of an idle node's CPU.
    # Now the answer after the poll looks only at what the first look did not find caught up
    # and what changed; the caught-up partitions wake the poll through the session.
    from broker.partitions.partition import Partition
    from broker.replication import replica_fetch
    monkeypatch.setattr(replica_fetch, "FULL_VISIT_MS", 0)
    many = 300
    waiters = [0]
    original = Partition.add_waiter

    def counted(self, event, follower=False):
        waiters[0] += follower
        return original(self, event, follower)
    monkeypatch.setattr(Partition, "add_waiter", counted)

    async def body(cluster, client):
        fetchers = await _idle_sessions(cluster, many)
        sessions = _follower_sessions(cluster)
        epochs, visited, added = [f.session.epoch for f in fetchers], sum(s.follower.visited for s in sessions), waiters[0]
        await trio.sleep(1.0)
        fetches = sum(f.session.epoch for f in fetchers) - sum(epochs)
        work = sum(s.follower.visited for s in sessions) - visited
        assert fetches >= 5, fetches
        # every fetch a full visit: 300 partitions looked at once per fetch (twice before)
        assert work <= many * (fetches + 2), (work, fetches)
        assert waiters[0] - added <= 2 * (fetches + 2), (waiters[0] - added, fetches)
        # what changes is still answered, and acks=all completes
        r = await client.produce(2, "s", [b"x"], partition=5)
        assert r.error_code == 0, r
        for n in (1, 3):
            await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("s", 5).high_watermark == 1,
                                   what=f"s-5's high watermark on broker {n}")
    _run(body)


def test_a_log_start_moved_by_retention_reaches_idle_followers(monkeypatch):
    # An idle follower session leaves caught-up partitions out of its fetches until they change.
    # Retention moving the leader's log start was seen only at the next visit of every
    # partition (once every 10 s); now it names the partition to the sessions at once, as
    # Kafka's followers learn the leader's log start at their next fetch. (The visit of every
    # partition is turned off here: this is what reaches the followers without it.)
    from broker.replication import fetcher, replica_fetch
    monkeypatch.setattr(replica_fetch, "FULL_VISIT_MS", 600_000)
    monkeypatch.setattr(fetcher, "FULL_VISIT_MS", 600_000)

    async def body(cluster, client):
        c = cluster.brokers[cluster.controller].controller
        c.create_topic(TopicSpec("r", -1, -1, {"min.insync.replicas": "2", "segment.bytes": "1100",
                                               "retention.bytes": "2200"},
                                 assignments=[(0, [2, 3, 1])]))
        await cluster.wait_for(lambda: ("r", 0) in cluster.brokers[2].replication.leaders, what="leadership")
        for i in range(6):
            r = await client.produce(2, "r", [b"v" * 1000])   # acks=all; a segment each
            assert r.error_code == 0 and r.base_offset == i, r
        for n in (1, 3):
            await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("r", 0).high_watermark == 6,
                                   what=f"high watermark on broker {n}")
        await trio.sleep(0.5)   # (idle fetches: the partition left out of the sessions' fetches)
        leader = cluster.brokers[2].partitions.get("r", 0)
        assert leader.log.apply_retention(None, leader.high_watermark) > 0
        start = leader.log_start_offset
        assert start >= 3, start
        for n in (1, 3):
            await cluster.wait_for(lambda n=n: cluster.brokers[n].partitions.get("r", 0).log_start_offset == start,
                                   what=f"log start {start} on broker {n}")
        # and the followers tell the leader theirs (DeleteRecords' low watermark)
        await cluster.wait_for(lambda: cluster.brokers[2].replication.low_watermark(leader) == start,
                               what="low watermark")
    _run(body)
