"""The group state machine's share-group parts (KIP-932), mixed into GroupStateMachine: the records of
where a share group's share-partition state is (type 15, broker/groups/share_metadata.py) and of its
membership (types 10-14, broker/groups/share_records.py). Those modules, with their record codecs,
are imported at the first share-group input: a node without share groups never loads them (start-up
CPU, issue 26)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from kproto.errors import ErrorCode as E

if TYPE_CHECKING:
    from broker.groups.share_metadata import ShareStateMetadata


class ShareMetadataMixin:
    """GroupStateMachine's share-group records: `share_metadata` (group id -> ShareStateMetadata) holds
    what is replicated, `share_metadata_at` when (the clock of the step that wrote or loaded it);
    `put_share_metadata` writes a new value (an empty one is a tombstone) and answers once it is
    replicated, when it becomes the group's."""

    def put_share_metadata(self, ticket, now_ms: int, group_id: str, meta: ShareStateMetadata):
        from broker.groups.share_metadata import ShareMetadataResult, key_bytes, value_bytes   # (module doc)
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, ShareMetadataResult(err))
            return self._end()
        self._append(self.partition_for(group_id),
                     [(key_bytes(group_id), None if meta.empty() else value_bytes(meta))])
        self._fx.appends[-1].share_metadata = (group_id, meta)
        self._respond(ticket, ShareMetadataResult(E.NONE))
        return self._end()

    def share_topics_deleted(self, now_ms: int, topic_ids) -> object:
        """Deleted topics leave every share group's record (Kafka's maybeCleanupShareGroupState): their
        share-partition states go with the topic at the share coordinators."""
        self._begin(now_ms)
        for group_id, meta in list(self.share_metadata.items()):
            if self.status_error(group_id, allow_empty=False) is not None:
                continue
            from broker.groups.share_metadata import forget_topics, key_bytes, value_bytes   # (module doc)
            new = forget_topics(meta, topic_ids)
            if new != meta:
                self._append(self.partition_for(group_id),
                             [(key_bytes(group_id), None if new.empty() else value_bytes(new))])
                self._fx.appends[-1].share_metadata = (group_id, new)
        return self._end()

    def _share_metadata_stored(self, stored: tuple, error: int) -> None:
        group_id, meta = stored
        if error or self.status_error(group_id, allow_empty=False) is not None:
            return
        if meta.empty():
            self.share_metadata.pop(group_id, None)
            self.share_metadata_at.pop(group_id, None)
        else:
            self.share_metadata[group_id] = meta
            self.share_metadata_at[group_id] = self._now

    def _drop_partition_share_metadata(self, partition: int) -> None:
        for gid in [g for g in self.share_metadata if self.partition_for(g) == partition]:
            del self.share_metadata[gid]
            self.share_metadata_at.pop(gid, None)


class ShareRecordsMixin:
    """GroupStateMachine's share-group membership records. `share_loads`: partition -> {group id:
    ShareGroupLoad}, what replaces the share groups of that partition at the shell, which takes them
    (a load: the groups replayed; a resignation or a new load beginning: none). The latest per
    partition is all that counts, so it holds one entry per partition at most."""

    def put_share_records(self, ticket, now_ms: int, group_id: str, records: list):
        """Append a share group's membership records (broker/share/membership.py made them); NONE once
        they are replicated (the shell turns a failed append into the client's error)."""
        from broker.groups.share_records import ShareRecordsResult   # (module doc)
        self._begin(now_ms)
        err = self.status_error(group_id, allow_empty=False)
        if err is not None:
            self._respond(ticket, ShareRecordsResult(err))
            return self._end()
        if records:
            self._append(self.partition_for(group_id), list(records))
        self._respond(ticket, ShareRecordsResult(E.NONE))
        return self._end()

    def take_share_loads(self) -> dict:
        loads, self.share_loads = self.share_loads, {}
        return loads
