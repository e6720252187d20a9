"""Snapshots of the metadata image, taken automatically and loaded at start (KRaft's
SnapshotGenerator and the snapshot half of the metadata loader).

A snapshot `<end offset>-<epoch>.checkpoint` in `__cluster_metadata-0/` holds records that rebuild
the image as of the log end `end offset`: FeatureLevelRecord(s), each topic's TopicRecord and
PartitionRecords, ConfigRecords, the ProducerIdsRecord, broker registrations, client quotas, ACLs,
SCRAM credentials and delegation tokens, in the order Kafka's MetadataImage.write uses.
One is taken once `metadata.log.max.record.bytes.between.snapshots` bytes of records were appended
since the last, or `metadata.log.max.snapshot.interval.ms` passed with new records. At start the
newest snapshot is loaded and only the log after its end offset is replayed. The two newest
snapshots are kept, and the log below them goes by metadata.max.retention.bytes / .ms
(broker/metadata/retention.py).
"""
from __future__ import annotations

import logging
import os
import time

from kproto.metadata.config_record import ConfigRecord
from kproto.metadata.feature_level_record import FeatureLevelRecord
from kproto.metadata.partition_record import PartitionRecord
from kproto.metadata.producer_ids_record import ProducerIdsRecord
from kproto.metadata.topic_record import TopicRecord

from broker.metadata.image import TOPIC_RESOURCE
from broker.metadata import retention as metadata_retention, snapshots

log = logging.getLogger("kproto.quorum")
KEEP = 2


def image_records(image, metadata_version: int, node_id: int) -> list:
    features = dict(image.features)
    features.setdefault("metadata.version", metadata_version)
    out = [FeatureLevelRecord(name="metadata.version", feature_level=features.pop("metadata.version"))]
    out += [FeatureLevelRecord(name=n, feature_level=v) for n, v in sorted(features.items())]
    # broker registrations, with their fenced / in-controlled-shutdown state (a snapshot without
    # them made every replica offline and every leader unacceptable on a node that loaded it)
    out += [reg for _bid, reg in sorted(image.brokers.items()) if hasattr(reg, "encode_into")]
    # controller registrations (KIP-919), which DescribeCluster on the controller listener lists
    out += [reg for _cid, reg in sorted(getattr(image, "controllers", {}).items())]
    for t in image.topics.values():
        out.append(TopicRecord(name=t.name, topic_id=t.topic_id))
        for p in sorted(t.partitions.values(), key=lambda p: p.partition):
            out.append(PartitionRecord(
                partition_id=p.partition, topic_id=t.topic_id, replicas=list(p.replicas), isr=list(p.isr),
                removing_replicas=list(p.removing_replicas), adding_replicas=list(p.adding_replicas),
                leader=p.leader, leader_recovery_state=0,
                leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                directories=list(getattr(p, "directories", [])),
                eligible_leader_replicas=None, last_known_elr=None))
    for t in image.topics.values():
        out += [ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=t.name, name=k, value=v)
                for k, v in t.configs.items()]
    for (resource_type, resource_name), configs in image.configs.items():
        out += [ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=k, value=v)
                for k, v in configs.items()]
    if image.client_quotas:
        # (the quota and SCRAM codecs are imported only when there are some: most clusters have none)
        from kproto.metadata.client_quota_record import ClientQuotaRecord, EntityData
        for entity, values in image.client_quotas.items():
            ents = [EntityData(entity_type=t, entity_name=n) for t, n in sorted(entity, key=lambda e: e[0])]
            out += [ClientQuotaRecord(entity=ents, key=k, value=v, remove=False) for k, v in values.items()]
    if image.next_producer_id:
        out.append(ProducerIdsRecord(broker_id=node_id, broker_epoch=0, next_producer_id=image.next_producer_id))
    # ACLs, SCRAM credentials and delegation tokens (lost at the next start otherwise)
    out += [acl.record(acl_id) for acl_id, acl in image.acls.items()]
    if image.scram:
        from kproto.metadata.user_scram_credential_record import UserScramCredentialRecord
        out += [UserScramCredentialRecord(name=name, mechanism=mech, salt=salt, stored_key=stored,
                                          server_key=server, iterations=iterations)
                for (name, mech), (salt, stored, server, iterations) in image.scram.items()]
    out += list(image.delegation_tokens.values())
    return out


def latest(partition_dir: str):
    """(end offset, Snapshot) of the newest snapshot, or None."""
    ids = snapshots.list_snapshots(partition_dir)
    if not ids:
        return None
    end, epoch = ids[-1]
    return end, snapshots.read(os.path.join(partition_dir, snapshots.file_name(end, epoch)))


class Snapshotter:
    """Decides when to snapshot the image and writes the snapshot."""

    def __init__(self, plog, image, *, max_bytes: int, max_interval_ms: int, metadata_version: int,
                 node_id: int, voter_set=None, sync: bool = True, retention_bytes: int = 104857600,
                 retention_ms: int = 604800000):
        self.plog, self.image = plog, image
        self.max_bytes, self.max_interval_ms = max_bytes, max_interval_ms
        self.metadata_version, self.node_id, self.voter_set, self.sync = metadata_version, node_id, voter_set, sync
        self.bytes_since = 0
        self.last_ms = int(time.time() * 1000)
        # metadata.max.retention.bytes / .ms (broker/metadata/retention.py)
        self.retention_bytes, self.retention_ms = retention_bytes, retention_ms

    def appended(self, nbytes: int) -> str | None:
        """Count an append; take a snapshot when one is due. Returns its path, if any."""
        self.bytes_since += nbytes
        now = int(time.time() * 1000)
        if self.bytes_since < self.max_bytes and not (self.max_interval_ms and now - self.last_ms >= self.max_interval_ms):
            return None
        return self.take(now)

    def take(self, now: int | None = None) -> str:
        now = int(time.time() * 1000) if now is None else now
        end = self.plog.log_end_offset
        epoch = self.plog.epochs.epoch_for_offset(end - 1) or 0
        path = snapshots.write_snapshot(
            self.plog.dir, end, epoch, image_records(self.image, self.metadata_version, self.node_id),
            last_contained_timestamp=now, voters=self.voter_set,
            kraft_version=1 if self.voter_set is not None else 0, sync=self.sync)
        self.bytes_since, self.last_ms = 0, now
        for old_end, old_epoch in snapshots.list_snapshots(self.plog.dir)[:-KEEP]:
            try:
                os.unlink(os.path.join(self.plog.dir, snapshots.file_name(old_end, old_epoch)))
            except OSError:
                log.warning("could not delete metadata snapshot %s-%s", old_end, old_epoch)
        log.info("metadata snapshot at offset %d epoch %d", end, epoch)
        metadata_retention.maybe_clean(self.plog, self.retention_bytes, self.retention_ms, now)
        return path
