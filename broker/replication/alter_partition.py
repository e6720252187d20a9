"""AlterPartition on the controller: a partition leader asks to shrink or
expand its ISR. Validation, errors and their order as Kafka 3.9's
ReplicationControlManager.validateAlterPartitionData; an accepted change is a
PartitionChangeRecord and the answer carries the partition's new state."""
from __future__ import annotations

from kproto.errors import ErrorCode
from kproto.messages.alter_partition_request import AlterPartitionRequest
from kproto.messages.alter_partition_response import AlterPartitionResponse
from kproto.metadata.partition_change_record import PartitionChangeRecord

from broker.metadata.directory_id import is_online, replica_dir
from broker.replication.brokers import BrokerInfo
from broker.replication.election import RECOVERED, RECOVERING

_Topic = AlterPartitionResponse.TopicData
_Part = AlterPartitionResponse.PartitionData


def _new_isr(pd, version: int) -> list[tuple[int, int]]:
    if version >= 3:
        return [(s.broker_id, s.broker_epoch) for s in pd.new_isr_with_epochs]
    return [(b, -1) for b in pd.new_isr]


def validate(broker_id: int, p, pd, version: int, brokers: dict[int, BrokerInfo]) -> ErrorCode:
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # a higher epoch than ours: this node is likely no longer the active controller
    if pd.leader_epoch > p.leader_epoch or pd.partition_epoch > p.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if pd.leader_epoch < p.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if broker_id != p.leader:
        return ErrorCode.INVALID_REQUEST
    if pd.partition_epoch < p.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    new_isr = _new_isr(pd, version)
    ids = [b for b, _e in new_isr]
    if not ids or len(set(ids)) != len(ids) or any(b not in p.replicas for b in ids):
        return ErrorCode.INVALID_REQUEST
    if p.leader not in ids:
        return ErrorCode.INVALID_REQUEST   # the ISR always holds the leader
    recovery = getattr(pd, "leader_recovery_state", RECOVERED)
    if recovery == RECOVERING and len(ids) > 1:
        return ErrorCode.INVALID_REQUEST
    if getattr(p, "leader_recovery_state", RECOVERED) == RECOVERED and recovery == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    for b, epoch in new_isr:
        info = brokers.get(b)
        if (info is None or info.in_controlled_shutdown or info.fenced or (epoch != -1 and info.epoch != epoch)
                or not is_online(replica_dir(p, b), info.log_dirs)):   # in a failed log dir (KIP-858)
            # Kafka answers OPERATION_NOT_ATTEMPTED to AlterPartition v0 clients
            return ErrorCode.INELIGIBLE_REPLICA if version > 0 else ErrorCode.OPERATION_NOT_ATTEMPTED
    return ErrorCode.NONE


def handle(image, req, version: int, brokers: dict[int, BrokerInfo]) -> tuple[AlterPartitionResponse, list]:
    """(response, records to append). Stale broker epochs fail the whole request."""
    info = brokers.get(req.broker_id)
    if info is None or (req.broker_epoch != -1 and info.epoch != -1 and req.broker_epoch != info.epoch):
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.STALE_BROKER_EPOCH, topics=[]), []
    records = []
    topics_out = []
    for td in req.topics:
        t = image.topics_by_id.get(td.topic_id) if version >= 2 else image.topics.get(td.topic_name)
        parts_out = []
        topics_out.append(_Topic(topic_name=td.topic_name if version < 2 else "", topic_id=td.topic_id,
                                 partitions=parts_out))
        for pd in td.partitions:
            if t is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 2 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts_out.append(_error(pd.partition_index, code))
                continue
            p = t.partitions.get(pd.partition_index)
            code = validate(req.broker_id, p, pd, version, brokers)
            if code != ErrorCode.NONE:
                parts_out.append(_error(pd.partition_index, code))
                continue
            ids = [b for b, _e in _new_isr(pd, version)]
            recovery = getattr(pd, "leader_recovery_state", RECOVERED)
            isr_changed = ids != list(p.isr)
            recovery_changed = recovery != getattr(p, "leader_recovery_state", RECOVERED)
            epoch = p.partition_epoch
            if isr_changed or recovery_changed:
                r = PartitionChangeRecord(partition_id=p.partition, topic_id=t.topic_id)
                if isr_changed:
                    r.isr = ids
                if recovery_changed:
                    r.leader_recovery_state = recovery
                records.append(r)
                epoch += 1   # what the image's partition epoch becomes once the record applies
            parts_out.append(_Part(partition_index=p.partition, error_code=0, leader_id=p.leader,
                                   leader_epoch=p.leader_epoch, isr=ids, leader_recovery_state=recovery,
                                   partition_epoch=epoch))
    return AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=topics_out), records


def _error(index: int, code: ErrorCode) -> _Part:
    return _Part(partition_index=index, error_code=code, leader_id=-1, leader_epoch=-1, isr=[],
                 leader_recovery_state=0, partition_epoch=-1)


class Batch:
    """The leader's side: ISR changes of many partitions in one AlterPartition request (v2+,
    topic ids), and each one's answer code. A partition queued twice is asked for once, with
    the latest change (as Kafka's AlterPartitionManager keeps one unsent item per partition)."""

    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.items: list = []        # (partition, leader state, new ISR), in request order
        self._keys: list = []        # (topic id, partition index) of each item
        self._index: dict = {}

    def add(self, topic_id, part, state, new_isr: list[int]) -> None:
        key = (topic_id, part.index)
        i = self._index.get(key)
        if i is None:
            self._index[key] = len(self.items)
            self.items.append((part, state, new_isr))
            self._keys.append(key)
        else:
            self.items[i] = (part, state, new_isr)

    def request(self) -> AlterPartitionRequest:
        topics: dict = {}
        for (topic_id, index), (_part, state, new_isr) in zip(self._keys, self.items):
            topics.setdefault(topic_id, []).append(AlterPartitionRequest.PartitionData(
                partition_index=index, leader_epoch=state.leader_epoch, new_isr=list(new_isr),
                leader_recovery_state=0, partition_epoch=state.partition_epoch))
        return AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=-1, topics=[
            AlterPartitionRequest.TopicData(topic_id=tid, partitions=ps) for tid, ps in topics.items()])

    def codes(self, resp) -> list[ErrorCode]:
        """Each item's answer: the request's error if it has one, else its partition's (a
        partition the answer leaves out counts as UNKNOWN_SERVER_ERROR)."""
        if resp.error_code:
            return [ErrorCode(resp.error_code)] * len(self.items)
        got = {(t.topic_id, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}
        return [ErrorCode(got.get(key, ErrorCode.UNKNOWN_SERVER_ERROR)) for key in self._keys]
