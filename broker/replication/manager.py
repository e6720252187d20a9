"""The broker side of replication: after every metadata change this broker
becomes leader or follower of each partition it hosts (by leader epoch).

- A leader keeps a LeaderState per partition (followers' log end offsets, the
  high watermark, ISR shrink/expand through AlterPartition to the controller)
  and completes acks=all produces when the high watermark covers them.
- A follower fetches from its leader's broker listener (one fetcher task per
  leader broker, Fetch v16 with ReplicaState) and truncates its divergent tail
  from the diverging epoch of the answer before appending.
- DeleteRecords on a leader waits for the low watermark (low_watermark.py); a
  follower adopts the log start offset of its leader's fetch answers.
- On the active controller (or a lone node) it also writes the elections that
  broker fencing / controlled shutdown require (election.sweep).

Partitions with a single replica are left alone: their high watermark is
their log end offset, as before."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from kproto.errors import ErrorCode, KafkaError

from broker.metadata.delta import PartitionDelta
from broker.metadata.internal_topics import OFFSETS_TOPIC
from broker.replication import election, preferred, reassigner
from broker.replication.low_watermark import LowWatermarkWaits
from broker.replication.quota import ReplicationQuotas
from broker.replication.replica_fetch import YIELD_EVERY

# What only a replicated partition runs is imported where it starts: the follower's fetcher
# (fetcher.py: the Fetch request codec, the connection to its leader and its SASL/TLS) at the
# first followed partition, a leader's LeaderState at the first replicated leadership, ISR
# changes (alter_partition.py and its codecs) at the first one. A single node runs none of
# them (start-up CPU, issue 26).
if TYPE_CHECKING:
    from broker.replication.client import BrokerConnection
    from broker.replication.fetcher import Fetcher
    from broker.replication.leader_state import LeaderState

log = logging.getLogger("kproto.replication")

ALTER_PARTITION_VERSION = 2
ALTER_PARTITION_BATCH = 10000   # ISR changes per AlterPartition request at most
SWEEP_INTERVAL_S = 10.0         # the active controller's election sweep without a metadata change
SWEEP_SLICE_S = 1.0             # ... made a slice of its topics at a time, this often
_NO_LEADER_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                     ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ErrorCode.UNKNOWN_TOPIC_ID)


def _now_ms() -> int:
    return int(time.time() * 1000)


def endpoint_from_image(image, broker_id: int, listener: str | None = None):
    """(host, port) of a registered broker's listener (the named one, else its first)."""
    reg = getattr(image, "brokers", {}).get(broker_id)
    if reg is None:
        return None
    eps = list(getattr(reg, "end_points", []) or [])
    for e in eps:
        if listener is None or e.name == listener:
            return e.host, e.port
    return (eps[0].host, eps[0].port) if eps else None


class ReplicationManager:
    def __init__(self, broker):
        self.broker = broker
        self.node_id = broker.node_id
        self.leaders: dict[tuple[str, int], LeaderState] = {}
        self._ack_waiters: dict[tuple[str, int], list] = {}   # [(offset needed, event, result)]
        self.low_watermarks = LowWatermarkWaits()             # DeleteRecords waiting for the followers
        self.fetchers: dict[int, Fetcher] = {}
        self._nursery = None
        self._alter_send, self._alter_recv = trio.open_memory_channel(1000)
        self._sweep_needed = True
        # set (and replaced) on every metadata change: what a single node's periodic checks wait on
        self._changed = trio.Event()
        self._coordinator_owned: dict[int, bool] = {}   # __consumer_offsets partition -> led here
        self._coordinator_changes: list[tuple[int, bool]] = []
        self.role_visits = 0   # partitions whose role reconcile looked at (tests count the work)
        self.swept = 0         # partitions the controller's election sweeps looked at (the same)
        # what the next election sweep visits: fed by the broker's metadata listener
        self.elections = PartitionDelta(self.node_id, elections=True)
        # Kafka's ReplicaManager meters IsrShrinksPerSec / IsrExpandsPerSec / FailedIsrUpdatesPerSec:
        # ISR changes this leader asked for with AlterPartition, counted when the controller accepted
        # them (a shrink the controller makes itself, fencing a broker, is not counted: as Kafka)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_isr_updates = 0
        self.endpoint_of = lambda broker_id: endpoint_from_image(
            broker.image, broker_id, self._inter_broker_listener())
        # replication throttles (KIP-73): the leader and follower quotas of this broker
        self.quotas = ReplicationQuotas(self.node_id, broker.config)

    def _inter_broker(self):
        """broker/security/outbound.py's settings for the inter-broker listener (None: plaintext)."""
        security = getattr(self.broker, "security", None)
        return getattr(security, "inter_broker", None)

    def _inter_broker_listener(self):
        out = self._inter_broker()
        if out is not None:
            return out.listener
        return self.broker.config.get("inter.broker.listener.name") or None

    def connection(self, host: str, port: int, client_id: str) -> BrokerConnection:
        from broker.replication.client import BrokerConnection   # (a peer's first connection)
        out = self._inter_broker()
        return BrokerConnection(host, port, client_id, out.connect if out is not None and out.secured else None)

    def _cfg_int(self, key: str, default: int) -> int:
        try:
            return int(self.broker.config.get(key))
        except (KeyError, TypeError, ValueError):
            return default

    @property
    def lag_max_ms(self) -> int:
        return self._cfg_int("replica.lag.time.max.ms", 30000)

    # -- roles ---------------------------------------------------------------------------

    def reconcile(self, keys=None) -> None:
        """After ReplicaManager.reconcile: apply leader/follower roles, to the partitions of
        ``keys`` (those a metadata change named: broker/metadata/delta.py) or, None, to every
        hosted partition."""
        self._sweep_needed = True
        self._changed.set()
        self._changed = trio.Event()
        image = self.broker.image
        self.quotas.refresh(image)   # the topics' throttled-replica lists
        may_lead = self.may_lead()
        if keys is not None:
            self.role_visits += len(keys)
            for key in keys:
                part = self.broker.partitions.get(*key)
                t = image.topics.get(key[0])
                p = t.partitions.get(key[1]) if t is not None and part is not None else None
                if p is not None:
                    self._apply_role(part, p, may_lead)
                    continue
                self._drop_leader(key)   # no longer hosted here
                for f in self.fetchers.values():
                    f.unfollow(key)
            self._coordinator_roles()
            return
        seen = set()
        self.role_visits += len(self.broker.partitions.all())
        for part in list(self.broker.partitions.all()):
            t = image.topics.get(part.topic)
            p = t.partitions.get(part.index) if t else None
            if p is None:
                continue
            seen.add((part.topic, part.index))
            self._apply_role(part, p, may_lead)
        for key in [k for k in self.leaders if k not in seen]:
            self._drop_leader(key)
        self._coordinator_roles()
        for f in self.fetchers.values():
            f.retain(seen)

    def adopt(self, parts) -> None:
        """Roles of partitions whose logs were just made (broker/partitions/creation.py), as
        reconcile gives every hosted partition: a follower starts fetching only now that its log
        exists. Only these partitions: a slice of a large creation must not walk them all."""
        image = self.broker.image
        may_lead = self.may_lead()
        for part in parts:
            t = image.topics.get(part.topic)
            p = t.partitions.get(part.index) if t else None
            if p is not None and self.broker.partitions.get(part.topic, part.index) is part:
                self._apply_role(part, p, may_lead)
        self._sweep_needed = True

    def _apply_role(self, part, p, may_lead: bool) -> None:
        if len(p.replicas) <= 1 and p.leader == self.node_id and part.replication is None and may_lead:
            return   # never replicated (a reassignment may have made it so): nothing changes for it
        if p.leader == self.node_id and may_lead:
            self._become_leader(part, p)
        elif p.leader == self.node_id:
            # named leader under a registration that is not this process's (its previous run,
            # killed, until the controller fences it) or a fenced one: neither leader nor follower
            self._become_follower(part, _Leaderless(p.leader_epoch))
        else:
            self._become_follower(part, p)

    def may_lead(self) -> bool:
        """Whether this process may act on the leaderships the image gives its node id: in a
        cluster, only under its own registration (this process's incarnation), unfenced. Kafka's
        broker serves nothing before it is registered, caught up and unfenced."""
        q = getattr(self.broker, "quorum", None)
        regs = getattr(self.broker.image, "brokers", None)
        incarnation = getattr(q, "incarnation", None)
        if incarnation is None or not regs:
            return True   # a single node (or an in-process test cluster): its own broker
        b = regs.get(self.node_id)
        return b is not None and b.incarnation_id == incarnation and not b.fenced

    def _coordinator_roles(self) -> None:
        """The group coordinator follows the leadership of the __consumer_offsets partitions
        (Kafka's onElection / onResignation). At start the coordinator has loaded every local
        partition; one this broker does not lead is dropped, and later changes load or drop."""
        t = self.broker.image.topics.get(OFFSETS_TOPIC)
        if t is None:
            return
        may_lead = self.may_lead()
        for index, p in t.partitions.items():
            led = p.leader == self.node_id and may_lead
            before = self._coordinator_owned.get(index)
            if before == led or (before is None and led):
                self._coordinator_owned[index] = led
                continue
            self._coordinator_owned[index] = led
            self._coordinator_changes.append((index, led))
        self._run_coordinator_changes()

    def _run_coordinator_changes(self) -> None:
        groups = getattr(self.broker, "groups", None)
        if self._nursery is None or groups is None or not self._coordinator_changes:
            return
        changes, self._coordinator_changes = self._coordinator_changes, []
        for index, led in changes:
            self._nursery.start_soon(groups.partition_leadership, index, led)

    def _become_leader(self, part, p) -> None:
        key = (part.topic, part.index)
        state = self.leaders.get(key)
        if state is not None and state.leader_epoch == p.leader_epoch:
            if state.replicas != list(p.replicas):   # a reassignment adds replicas
                state.update_replicas(p.replicas, _now_ms())
            if state.partition_epoch != p.partition_epoch or state.isr != list(p.isr):
                state.update_isr(p.isr, p.partition_epoch)
                self._advance(part, state)
                part.notify()   # a follower left out of the ISR is looked at every fetch again
            return
        for f in self.fetchers.values():
            f.unfollow(key)
        part.is_leader = True
        part.leader_epoch = p.leader_epoch
        part.log.assign_epoch(p.leader_epoch)
        from broker.replication.leader_state import LeaderState   # (the first replicated leadership)
        hw = part.replicated_hw if part.replicated_hw is not None else part.log.log_start_offset
        state = LeaderState(self.node_id, p.replicas, p.isr, p.leader_epoch, p.partition_epoch,
                            part.log.log_end_offset, min(hw, part.log.log_end_offset), _now_ms())
        self.leaders[key] = state
        part.replicated_hw = state.hw
        part.replication = self
        part.notify()   # followers' sessions that left it out of their fetches look at it again
        log.info("%s-%d: leader at epoch %d (isr %s, hw %d, leo %d)", part.topic, part.index,
                 p.leader_epoch, p.isr, state.hw, part.log.log_end_offset)
        self._advance(part, state)

    def _become_follower(self, part, p) -> None:
        key = (part.topic, part.index)
        if key in self.leaders:
            self._drop_leader(key)
        part.is_leader = False
        part.replication = self
        if part.leader_epoch != p.leader_epoch:
            part.leader_epoch = p.leader_epoch
            f = self.fetchers.get(p.leader)
            if f is not None:
                f.moved(key)   # its next fetch says the new epoch
        if part.replicated_hw is None:
            part.replicated_hw = part.log.log_start_offset
        for lid, f in self.fetchers.items():
            if lid != p.leader:
                f.unfollow(key)
        if p.leader < 0:
            return
        f = self.fetchers.get(p.leader)
        if f is None or f.done:
            from broker.replication.fetcher import Fetcher   # (the first leader followed)
            f = self.fetchers[p.leader] = Fetcher(self, p.leader)
            if self._nursery is not None:
                self._nursery.start_soon(f.run)
        if key not in f.partitions:
            f.lag.pop(key, None)   # a new fetch state: not known to be in sync
        f.follow(key, part)

    def _drop_leader(self, key) -> None:
        if self.leaders.pop(key, None) is not None:
            part = self.broker.partitions.get(*key)
            if part is not None:
                part.notify()   # followers' sessions answered NOT_LEADER_OR_FOLLOWER from now on
        self.low_watermarks.wake(key)
        waiters = self._ack_waiters.pop(key, [])
        # a partition whose log dir failed answers KAFKA_STORAGE_ERROR, as Kafka's DelayedProduce
        # (getPartitionOrError of an offline partition)
        error = (ErrorCode.KAFKA_STORAGE_ERROR if waiters and self.broker.partitions.missing_error(*key)
                 == ErrorCode.KAFKA_STORAGE_ERROR else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        for _off, ev, result in waiters:
            result["error"] = error
            ev.set()

    # -- the leader's bookkeeping --------------------------------------------------------

    def appended(self, part) -> None:
        """Partition.append hook: a leader whose ISR is itself moves its high watermark now."""
        state = self.leaders.get((part.topic, part.index))
        if state is not None:
            self._advance(part, state)

    def log_start_moved(self, part) -> None:
        """Partition hook: the log start moved here (retention, the cleaner, DeleteRecords,
        adopting the leader's). A follower tells its leader at its next fetch (DeleteRecords'
        low watermark waits for it): its fetcher looks at the partition again."""
        if not part.is_leader:
            key = (part.topic, part.index)
            for f in self.fetchers.values():
                if key in f.partitions:
                    f.moved(key)

    def leader_isr(self, part) -> list[int]:
        """The committed ISR of a partition this broker leads (Partition.inSyncReplicaIds)."""
        state = self.leaders.get((part.topic, part.index))
        return state.isr if state is not None else []

    def follower_fetched(self, part, replica: int, fetch_offset: int, now_ms: int,
                         log_start: int | None = None, idle=None) -> bool:
        """A follower's fetch of a partition this broker leads. ``idle``: the follower's
        session would leave the partition out of its next fetches (replica_fetch.IdleSession),
        which it may if the follower is in the (maximal) ISR: True then. A follower out of it is
        looked at every fetch, so it joins the ISR as soon as it may."""
        key = (part.topic, part.index)
        state = self.leaders.get(key)
        if state is None:
            return False
        leo = part.log.log_end_offset
        state.follower_fetched(replica, fetch_offset, leo, now_ms, log_start)
        self.low_watermarks.wake(key)
        self._advance(part, state)
        new_isr = state.isr_to_expand(leo)
        if new_isr is not None:
            # Kafka adds only replicas whose broker may join: registered, unfenced, not shutting down
            brokers = self.broker.controller.brokers()
            new_isr = [b for b in new_isr if b in state.isr or (b in brokers and brokers[b].acceptable_leader)]
            if new_isr != state.isr:
                self._alter_isr(part, state, new_isr)
        if idle is not None and replica in state.maximal_isr:
            state.followers[replica].idle = idle
            return True
        return False

    def follower_left(self, topic: str, index: int, replica: int) -> None:
        """A follower's session no longer fetches the partition: its idle fetches stop counting."""
        state = self.leaders.get((topic, index))
        f = state.followers.get(replica) if state is not None else None
        if f is not None:
            f.settle()

    def low_watermark(self, part) -> int:
        """Kafka's Partition.lowWatermarkIfLeader: the smallest log start offset of the
        replicas on live (registered, unfenced) brokers, this leader's included."""
        start = part.replication_log_start_offset
        state = self.leaders.get((part.topic, part.index))
        return start if state is None else state.low_watermark(start, self._broker_alive)

    async def wait_low_watermark(self, part, offset: int, deadline: float) -> tuple[ErrorCode, int]:
        """DeleteRecords: (error, low watermark) once the low watermark reaches offset
        (low_watermark.py)."""
        return await self.low_watermarks.wait(self, part, offset, deadline)

    def _broker_alive(self, broker_id: int) -> bool:
        regs = getattr(self.broker.image, "brokers", None)
        if not regs:
            return True   # a single node or an in-process test cluster: no registrations
        reg = regs.get(broker_id)
        return reg is not None and not reg.fenced

    def _advance(self, part, state) -> None:
        if state.advance_high_watermark(part.log.log_end_offset):
            part.replicated_hw = state.hw
            waiters = self._ack_waiters.get((part.topic, part.index))
            if waiters:
                keep = []
                for item in waiters:
                    if item[0] <= state.hw:
                        item[1].set()
                    else:
                        keep.append(item)
                waiters[:] = keep
            part.notify_high_watermark()   # consumers waiting for it (not followers' long polls)

    def min_isr(self, part) -> int:
        try:
            return int(part.config.get("min.insync.replicas", 1))
        except (TypeError, ValueError):
            return 1

    def check_min_isr(self, part) -> ErrorCode | None:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS if the ISR is smaller than min.insync.replicas."""
        state = self.leaders.get((part.topic, part.index))
        if state is not None and len(state.isr) < self.min_isr(part):
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return None

    async def wait_replicated(self, part, last_offset: int, timeout_ms: int) -> ErrorCode:
        """acks=all: wait until the high watermark passes last_offset (every
        ISR member has the batch). REQUEST_TIMED_OUT after timeout_ms;
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        min.insync.replicas meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved."""
        key = (part.topic, part.index)
        state = self.leaders.get(key)
        if state is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if state.hw <= last_offset:
            ev, result = trio.Event(), {}
            self._ack_waiters.setdefault(key, []).append((last_offset + 1, ev, result))
            with trio.move_on_after(max(0, timeout_ms) / 1000):
                await ev.wait()
            if "error" in result:
                return result["error"]
            if not ev.is_set():
                return ErrorCode.REQUEST_TIMED_OUT
            state = self.leaders.get(key)
            if state is None:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if len(state.isr) < self.min_isr(part):
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _alter_isr(self, part, state, new_isr: list[int]) -> None:
        state.pending_isr = list(new_isr)
        state.pending_since = _now_ms()
        try:
            self._alter_send.send_nowait((part, state, list(new_isr)))
        except trio.WouldBlock:
            state.pending_isr = None
            part.notify()   # asked again at the follower's next fetch

    # -- tasks ---------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for f in self.fetchers.values():
                if not f.done:
                    nursery.start_soon(f.run)
            nursery.start_soon(self._alter_partition_loop)
            nursery.start_soon(self._isr_shrink_loop)
            nursery.start_soon(self._controller_loop)
            nursery.start_soon(preferred.rebalance_loop, self.broker)   # auto.leader.rebalance.enable
            nursery.start_soon(reassigner.run, self)
            self._run_coordinator_changes()
            task_status.started()

    async def _isr_shrink_loop(self) -> None:
        while True:
            lag = self.lag_max_ms
            await trio.sleep(max(0.05, lag / 2000))
            now = _now_ms()
            for i, (key, state) in enumerate(list(self.leaders.items())):
                if i % YIELD_EVERY == YIELD_EVERY - 1:
                    await trio.lowlevel.checkpoint()   # (3,333 leaderships: one step of ~50 ms)
                part = self.broker.partitions.get(*key)
                if part is None or self.leaders.get(key) is not state:
                    continue
                if state.pending_isr is not None and now - getattr(state, "pending_since", now) > 5000:
                    state.pending_isr = None   # the answer never came: ask again
                    self._advance(part, state)
                    part.notify()   # (followers' idle sessions look at it again: the expansion is retried)
                new_isr = state.isr_to_shrink(now, lag, part.log.log_end_offset)
                if new_isr is not None:
                    log.info("%s-%d: shrinking isr %s -> %s", key[0], key[1], state.isr, new_isr)
                    self._alter_isr(part, state, new_isr)

    def alone(self) -> bool:
        """A single node: no quorum and no broker registered with its controller. No peer
        can fail, join or catch up there without a metadata change first."""
        return getattr(self.broker, "quorum", None) is None and not getattr(self.broker.image, "brokers", None)

    async def tick(self, seconds: float, changed: trio.Event | None = None) -> None:
        """The pause of a periodic check: ``seconds`` in a cluster; on a single node until the
        metadata changes (``changed``, taken before the last check) or a second passed, so an idle
        single node is not woken 30 times a second by checks that find nothing to do."""
        if not self.alone():
            wait = getattr(getattr(self.broker, "quorum", None), "until_may_be_active", None)
            # (off the metadata quorum's leader these checks find nothing to do: its leadership
            # changes first)
            await (trio.sleep(seconds) if wait is None else wait(seconds))
            return
        with trio.move_on_after(1.0):
            await (self._changed if changed is None else changed).wait()

    def _is_controller(self) -> bool:
        q = getattr(self.broker, "quorum", None)
        return q is None or bool(q.is_active_controller)

    async def _alter_partition_loop(self) -> None:
        """Sends the ISR changes asked for, one AlterPartition request at a time, each carrying
        every change queued meanwhile (Kafka's AlterPartitionManager batches its unsent items the
        same way): a follower back after a restart is added to thousands of ISRs in a few
        requests and commits, not one round trip and one commit per partition."""
        conn = None
        async for first in self._alter_recv:
            # (the first ISR change: a leader of a replicated partition, never a single node)
            from broker.replication import alter_partition
            from broker.security.outbound import AuthenticationFailed
            queued = [first]
            while len(queued) < ALTER_PARTITION_BATCH:
                try:
                    queued.append(self._alter_recv.receive_nowait())
                except trio.WouldBlock:
                    break
            image = self.broker.image
            batch = alter_partition.Batch(self.node_id)
            for part, state, new_isr in queued:
                t = image.topics.get(part.topic)
                if t is not None and self.leaders.get((part.topic, part.index)) is state:
                    batch.add(t.topic_id, part, state, new_isr)
            if not batch.items:
                continue
            req = batch.request()
            codes = None
            try:
                if self._is_controller():
                    codes = batch.codes(self.handle_alter_partition(req, ALTER_PARTITION_VERSION)[1])
                else:
                    cid = self.broker.quorum.active_controller_id
                    ep = self.endpoint_of(cid)
                    if ep is not None:
                        if conn is None or (conn.host, conn.port) != ep:
                            if conn is not None:
                                await conn.aclose()
                            conn = self.connection(ep[0], ep[1], f"alter-partition-{self.node_id}")
                        with trio.fail_after(5 + len(batch.items) / 1000):
                            resp = await conn.request(req, ALTER_PARTITION_VERSION)
                        codes = batch.codes(resp)
            except AuthenticationFailed as exc:
                log.error("AlterPartition for %d partitions: %s", len(batch.items), exc)
            except (OSError, EOFError, trio.TooSlowError, trio.BrokenResourceError, KafkaError) as exc:
                log.info("AlterPartition for %d partitions failed: %s", len(batch.items), exc)
                if conn is not None:
                    await conn.aclose()
                    conn = None
            if codes is None:
                codes = [ErrorCode.NOT_CONTROLLER] * len(batch.items)
            not_controller = False
            for (part, state, new_isr), code in zip(batch.items, codes):
                if code == ErrorCode.NONE:
                    if any(b not in state.isr for b in new_isr):
                        self.isr_expands += 1
                    else:
                        self.isr_shrinks += 1
                    continue
                self.failed_isr_updates += 1
                log.info("AlterPartition %s-%d isr %s: %s", part.topic, part.index, new_isr, code.name)
                if state.pending_isr == new_isr:
                    state.pending_isr = None
                    self._advance(part, state)   # the maximal ISR is the ISR again
                    part.notify()   # followers' idle sessions look at it again (an expansion is retried)
                not_controller |= code == ErrorCode.NOT_CONTROLLER
            if not_controller:
                await trio.sleep(0.1)

    def handle_alter_partition(self, req, version: int):
        """Controller side (this node is the active controller): validate, write the records."""
        from broker.replication import alter_partition   # (the first AlterPartition: a cluster's)
        resp, records = alter_partition.handle(self.broker.image, req, version, self.broker.controller.brokers())
        if records:
            self.broker.controller.log.append(records)
        return ErrorCode(resp.error_code or resp.topics[0].partitions[0].error_code), resp

    async def _controller_loop(self) -> None:
        """Elections after broker fencing / shutdown, written by the active controller. What a
        sweep decides follows from the metadata image alone (the brokers' view is built from it),
        so after a metadata change it visits the partitions the change named, or every one after
        a registration or config change (self.elections, broker/metadata/delta.py). The periodic
        sweep, a safety net across controller failovers, visits a tenth of the topics every
        second (each every SWEEP_INTERVAL_S): at 10,000 partitions one walk of them all was a
        step of ~100 ms on the event loop. A controller that takes over sweeps everything."""
        changed = self._changed
        full = True
        hold_until = next_slice = 0.0
        cursor = 0
        while True:
            await self.tick(0.1, changed)
            changed = self._changed
            if not self._is_controller():
                full = True
                continue
            if self.alone():
                continue   # a single node: nobody to fence, nothing to elect
            now = time.monotonic()
            if now < hold_until:
                continue
            image = self.broker.image
            keys, topics = set(), None
            if self._sweep_needed or full:
                self._sweep_needed = False
                keys = self.elections.take()
            if full or keys is None:
                full, keys = False, None
                next_slice = now + SWEEP_SLICE_S
            elif now >= next_slice:
                names = list(image.topics)
                step = -(-len(names) * SWEEP_SLICE_S // SWEEP_INTERVAL_S) or 1
                cursor = cursor if cursor < len(names) else 0
                topics = names[cursor:cursor + int(step)]
                cursor += int(step)
                next_slice = now + SWEEP_SLICE_S
                keys = {k for k in keys if k[0] not in topics}   # (swept with their topic)
            if keys is not None and not keys and not topics:
                continue
            brokers = self.broker.controller.brokers()
            unclean = election.unclean_default(self.broker.config)
            if keys is None:
                records = election.sweep(image, brokers, unclean)
                self.swept += sum(len(t.partitions) for t in image.topics.values())
            else:
                records = election.sweep(image, brokers, unclean, keys=keys) if keys else []
                if topics:
                    records += election.sweep(image, brokers, unclean, topics=topics)
                self.swept += len(keys) + sum(len(image.topics[n].partitions) for n in topics or ())
            if records:
                try:
                    self.broker.controller.log.append(records)
                    log.info("elections: %s", ", ".join(
                        f"{r.partition_id}:leader={r.leader},isr={r.isr}" for r in records))
                except KafkaError as exc:
                    log.info("elections not written: %s", exc)
                    full, hold_until = True, now + 1.0   # tried again soon, every partition


class _Leaderless:
    """A partition's image as a follower with no leader to fetch from sees it."""
    leader = -1

    def __init__(self, leader_epoch: int):
        self.leader_epoch = leader_epoch
