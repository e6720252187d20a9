"""`kproto consume --group`'s membership: the reader joins the group as a KIP-848 consumer
(ConsumerGroupHeartbeat), reads the partitions the coordinator assigns it, hands back revoked ones
after committing their positions, and leaves at the end, as a Kafka consumer with
`group.protocol=consumer` does. The admin CLI is synchronous, so the heartbeat is sent between
fetches when it is due; fetches wait at most a fraction of the heartbeat interval."""
from __future__ import annotations

import time
import uuid

from kproto.messages.consumer_group_heartbeat_request import ConsumerGroupHeartbeatRequest as Heartbeat
from kproto.messages.offset_commit_request import OffsetCommitRequest

from broker.admin.errors import AdminError, KafkaError, check

LEAVE_EPOCH = -1
# answers that mean the group cannot be joined with the consumer protocol: the reader falls back to
# reading every partition from the committed offsets without joining (assign mode)
NOT_JOINABLE = {35: "UNSUPPORTED_VERSION", 69: "GROUP_ID_NOT_FOUND", 23: "INCONSISTENT_GROUP_PROTOCOL",
                42: "INVALID_REQUEST"}
FENCED = {110, 112}   # FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID: join again with epoch 0
RETRIABLE = {14, 15, 16}   # coordinator loading, not available, not coordinator


class NotJoinable(Exception):
    """The coordinator refused the consumer protocol for this group (and why)."""


class GroupMember:
    def __init__(self, admin, group: str, topic: str, topic_id, rebalance_timeout_ms: int = 30000):
        self.admin = admin
        self.group = group
        self.topic = topic
        self.topic_id = topic_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.conn = admin.coordinator(group)
        self.version = self.conn.version(Heartbeat, 1)
        # v1 asks the client to choose its member id (KIP-1082); v0 lets the coordinator choose
        self.member_id = str(uuid.uuid4()) if self.version >= 1 else ""
        self.epoch = 0
        self.interval = 5.0
        self.owned: list[int] = []
        self._next = 0.0
        self._pending: list[int] | None = None   # an assignment received and not yet taken

    def join(self) -> None:
        """Join with epoch 0; an assignment in the answer is what the next beat() returns."""
        self.epoch = 0
        self._next = 0.0
        self._pending = self.beat(force=True, joining=True)

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def beat(self, force: bool = False, joining: bool = False) -> list[int] | None:
        """Send a heartbeat when due (or `force`): the new assignment for this topic, or None when
        it did not change. The owned partitions are what the caller reads right now."""
        if self._pending is not None and not joining:
            pending, self._pending = self._pending, None
            return pending
        if not force and not self.due():
            return None
        req = Heartbeat(group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
                        instance_id=None, rack_id=None,
                        rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
                        subscribed_topic_names=[self.topic] if joining else None,
                        server_assignor=None,
                        # what the reader owns now (full, not only changes: the coordinator
                        # completes a revocation when a revoked partition is no longer here)
                        topic_partitions=[Heartbeat.TopicPartitions(topic_id=self.topic_id,
                                                                    partitions=list(self.owned))]
                        if self.owned and not joining else [])
        resp = self.conn.call(req, self.version)
        code = resp.error_code
        if code in NOT_JOINABLE and joining:
            raise NotJoinable(f"{NOT_JOINABLE[code]}: {resp.error_message or 'the consumer protocol is refused'}")
        if code in FENCED and not joining:
            self.owned = []
            self.join()
            pending, self._pending = self._pending, None
            return pending if pending is not None else []
        if code in RETRIABLE:
            self.conn = self.admin.coordinator(self.group)
            self._next = time.monotonic() + 0.5
            return None
        if code:
            raise KafkaError(code, f"group {self.group}", resp.error_message or "")
        if resp.member_id:
            self.member_id = resp.member_id
        self.epoch = resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self.interval = resp.heartbeat_interval_ms / 1000
        self._next = time.monotonic() + self.interval
        if resp.assignment is None:
            return None
        parts = sorted(p for tp in resp.assignment.topic_partitions if tp.topic_id == self.topic_id
                       for p in tp.partitions)
        return parts

    def acknowledge(self, partitions: list[int]) -> None:
        """What the reader now owns; the next heartbeat tells the coordinator (which completes a
        revocation), so send it at once."""
        self.owned = sorted(partitions)
        self._next = 0.0

    def commit(self, positions: dict[int, int]) -> None:
        if not positions:
            return
        req = OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=self.epoch, member_id=self.member_id,
            group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                name=self.topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                    for p, o in sorted(positions.items())])])
        for t in self.conn.call(req, 9).topics:
            for p in t.partitions:
                check(p.error_code, f"commit of group {self.group} at {t.name}-{p.partition_index}")

    def leave(self) -> None:
        if self.epoch < 0:
            return
        try:
            self.conn.call(Heartbeat(group_id=self.group, member_id=self.member_id, member_epoch=LEAVE_EPOCH,
                                     instance_id=None, rack_id=None, rebalance_timeout_ms=-1,
                                     subscribed_topic_names=None, server_assignor=None, topic_partitions=None),
                           self.version)
        except (AdminError, OSError):
            pass   # the session timeout removes the member anyway
        self.epoch = LEAVE_EPOCH
