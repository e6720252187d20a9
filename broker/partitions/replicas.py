"""The partitions this broker hosts, kept in step with the metadata image:
after every metadata change the set of open partition logs is reconciled
with the topics the image holds.

A new partition's log is not made inside the metadata apply (past a handful): it is queued
(``pending``) and made afterwards in bounded slices (make_pending, driven by
broker/partitions/creation.py), as Kafka's broker creates logs after the
controller committed the records. CreateTopics is answered at the commit; until
its log exists a partition answers NOT_LEADER_OR_FOLLOWER (missing_error), which
clients retry.

A log that cannot be made (a full disk, EMFILE, EACCES...) fails its log directory, as Kafka's
LogManager.getOrCreateLog does: the failure goes to the broker's LogDirFailures
(``on_log_failure``: the directory is announced offline, and the broker halts once every log
directory has failed) and the partition is offline here (Kafka's HostedPartition.Offline): it
answers KAFKA_STORAGE_ERROR, not NOT_LEADER_OR_FOLLOWER, which clients would retry until a
restart. (With several log dirs, a partition directory that one dir cannot make is made in the
next: broker/storage/jbod.py.) A replica the broker should have had when it opened (in the image
then, its directory missing) is not made at all while a log dir is offline: its log may be in that
dir, and an empty one elsewhere would answer in place of its records (Kafka's getOrCreateLog with
isNew false); it is offline, assigned to the failed dir.

A failed directory, whatever failed it, takes the partitions it hosted offline the same way
(take_offline, Kafka's ReplicaManager.handleLogDirFailure), and each offline replica is
assigned to the dir it failed in, so that the controller moves it out of the ISR and
leadership (broker/storage/dir_assignments.py)."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import trio

from broker.config import TopicConfig
from broker.metadata.log import METADATA_TOPIC
from broker.partitions.partition import Partition
from broker.storage.errors import KafkaStorageError, LogDirOffline
from kproto.errors import ErrorCode

log = logging.getLogger("kproto.replicas")

# A metadata change that gives this node at most this many new partitions makes their logs in
# the apply, as before (a few ms each); more are queued for broker/partitions/creation.py.
INLINE_PARTITIONS = 16


@dataclass
class _Pending:
    """What the committed image said of a partition whose log is still to be made (the image
    itself may hold a quorum leader's uncommitted proposals by the time the log is made)."""
    topic_id: object
    leader: int
    leader_epoch: int
    # False: a replica the broker should have had when it opened (its directory missing): not
    # made while a log dir is offline, whose copy it may be (Kafka's getOrCreateLog isNew)
    is_new: bool = True


class ReplicaManager:
    def __init__(self, node_id: int, image, log_manager, broker_config):
        self.node_id = node_id
        self.image = image
        self.logs = log_manager
        self.config = broker_config
        self._partitions: dict[tuple[str, int], Partition] = {}
        # partitions the image gives this node whose logs are still to be made, oldest first
        self._pending: dict[tuple[str, int], _Pending] = {}
        self.on_pending = None          # callback() when partitions were queued (wakes the maker)
        # partitions whose log could not be made (their dir failed) -> their topic id
        self._offline: dict[tuple[str, int], object] = {}
        # ... and the log dir each one was in, or failed to be made in (where known): the broker
        # assigns the replica to it (broker/storage/dir_assignments.py), so that the controller
        # moves it out of the ISR and leadership; an UNASSIGNED replica would escape the move
        self._offline_dir: dict[tuple[str, int], str] = {}
        # callable(exc) -> bool: the broker's LogDirFailures.report for a failed log creation
        # (True: a failure of the directory, recorded and logged there)
        self.on_log_failure = None
        self.on_partition_created = []  # callbacks(partition)
        self.on_partition_removed = []  # callbacks(topic, index): what is kept per partition goes
        # partition -> set once its log is made here: what a coordinator's load waits for (wait_hosted)
        self._hosted: dict[tuple[str, int], trio.Event] = {}
        # Directories on disk that the image does not name are removed only once the image is
        # complete: a node of a multi-voter quorum opens with an empty image that catches up with
        # the committed log, and removing "strays" then would wipe every partition it hosts (as
        # Kafka, which deletes stray logs only once the broker has caught up with the metadata).
        self.strays_allowed = True
        # until the image is complete (the first reconcile, or a quorum node caught up): a replica
        # without a log then is one this broker should have had (_Pending.is_new False)
        self._opening = True

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def all(self):
        return self._partitions.values()

    def pending_count(self) -> int:
        return len(self._pending)

    def is_pending(self, topic: str, index: int) -> bool:
        """Whether the partition's log is queued to be made here (make_pending)."""
        return (topic, index) in self._pending

    async def wait_hosted(self, topic: str, index: int, timeout_s: float) -> Partition | None:
        """The partition once its log is made here (at once if it is), or None after timeout_s.
        The coordinators' loads start from this, as Kafka's metadata publisher calls their
        onElection after ReplicaManager.applyDelta made the logs: a coordinator never answers from
        a partition whose log is still to be made (broker/groups, broker/transactions)."""
        key = (topic, index)
        if key not in self._partitions:
            event = self._hosted.get(key)
            if event is None:
                event = self._hosted[key] = trio.Event()
            with trio.move_on_after(timeout_s):
                await event.wait()
        return self._partitions.get(key)

    def offline_count(self) -> int:
        """Partitions whose log could not be made (no Partition in all()): Kafka keeps them in
        allPartitions as HostedPartition.Offline, so its PartitionCount and OfflineReplicaCount
        count them (broker/metrics/cluster.py)."""
        return sum(1 for k in self._offline if k not in self._partitions)

    def offline_dir(self, topic: str, index: int) -> str | None:
        """The failed log dir of an offline partition (None: not offline, or not known)."""
        return self._offline_dir.get((topic, index)) if (topic, index) in self._offline else None

    def missing_error(self, topic: str, index: int) -> int:
        """The error for a partition this broker does not host (Kafka's getPartitionOrError):
        KAFKA_STORAGE_ERROR when its log could not be made (offline); NOT_LEADER_OR_FOLLOWER
        when the metadata names it (its log not made yet, or its replicas are elsewhere), so the
        client refreshes its metadata and retries; otherwise UNKNOWN_TOPIC_OR_PARTITION."""
        if (topic, index) in self._offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        t = self.image.topics.get(topic)
        if t is not None and index in t.partitions:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def topic_config(self, topic: str) -> dict:
        t = self.image.topics.get(topic)
        values = TopicConfig(self.config, t.configs if t else {}).as_dict()
        return {k: (",".join(v) if isinstance(v, list) else v) for k, v in values.items()}

    def reconcile(self, keys=None) -> None:
        """The hosted partitions after a metadata change: ``keys`` (topic, index) are those the
        change's records named (broker/metadata/delta.py); None walks every partition of the
        image (deletions, strays)."""
        if keys is not None:
            self._reconcile_keys(keys)
            return
        wanted = {}
        for t in self.image.topics.values():
            for p in t.partitions.values():
                if self.node_id in p.replicas:
                    wanted[(t.name, p.partition)] = (t, p)
        # deleted topics (and partitions of a topic re-created under a new id)
        for key, part in list(self._partitions.items()):
            entry = wanted.get(key)
            if entry is None or entry[0].topic_id != part.topic_id:
                self._remove(key)
        for key in [k for k, v in self._pending.items()
                    if k not in wanted or wanted[k][0].topic_id != v.topic_id]:
            del self._pending[key]   # deleted (or re-created) before its log was made
        for key in [k for k, topic_id in self._offline.items()
                    if k not in wanted or wanted[k][0].topic_id != topic_id]:
            del self._offline[key]   # (a re-created topic's partition is made afresh)
            self._offline_dir.pop(key, None)
        new: dict[tuple[str, int], _Pending] = {}
        for key, (t, p) in wanted.items():
            self._want(key, t, p, new)
        self._make_new(new)
        if self.strays_allowed:
            self.remove_strays()
        if self._pending and self.on_pending is not None:
            self.on_pending()

    def _reconcile_keys(self, keys) -> None:
        """reconcile() of the named partitions only: one whose replicas no longer include this
        node (a reassignment) goes; a deleted topic is a full walk (delta.py)."""
        new: dict[tuple[str, int], _Pending] = {}
        for key in keys:
            t = self.image.topics.get(key[0])
            p = t.partitions.get(key[1]) if t is not None else None
            if p is None or self.node_id not in p.replicas:
                if key in self._partitions:
                    self._remove(key)
                self._pending.pop(key, None)
                if self._offline.pop(key, None) is not None:
                    self._offline_dir.pop(key, None)
                continue
            self._want(key, t, p, new)
        self._make_new(new)
        if self._pending and self.on_pending is not None:
            self.on_pending()

    def _remove(self, key) -> None:
        partition = self._partitions.pop(key)
        # the log calls back into its partition: without that cycle, refcounting frees both at
        # once, even when a gc.freeze() (start-up's) keeps the cycle collector away from them
        partition.log.on_log_start_offset_change = None
        self.logs.delete_partition(*key)
        for cb in self.on_partition_removed:
            cb(*key)
        log.info("removed partition %s-%s", *key)

    def _want(self, key, t, p, new: dict) -> None:
        """A partition the image gives this node: its leader epoch if hosted, its log made if
        already open, else queued in ``new``."""
        if key in self._offline:
            return
        existing = self._partitions.get(key)
        if existing is not None:
            if existing.leader_epoch != p.leader_epoch:
                existing.leader_epoch = p.leader_epoch
                if p.leader == self.node_id:   # a follower's epochs come from its leader's batches
                    existing.log.assign_epoch(p.leader_epoch)
            return
        if self.logs.get(*key) is not None and key not in self._pending:
            # its log is open already (loaded at start-up): hosting it costs nothing
            self._make_or_fail(t.name, p.partition, _Pending(t.topic_id, p.leader, p.leader_epoch))
            return
        if key in self._pending:
            self._pending[key] = _Pending(t.topic_id, p.leader, p.leader_epoch,   # (its epoch moved)
                                          self._pending[key].is_new)
        else:
            new[key] = _Pending(t.topic_id, p.leader, p.leader_epoch, not self._opening)

    def _make_new(self, new: dict) -> None:
        # (internal topics too: their coordinators load a partition once its log is made here,
        # wait_hosted)
        if 0 < len(new) <= INLINE_PARTITIONS:
            # a few logs cost less than one slice of the maker: made here, so a client that
            # produces the moment its CreateTopics is answered finds them
            for (topic, index), want in new.items():
                self._make_or_fail(topic, index, want)
        elif new:
            self._pending.update(new)

    def _make(self, topic: str, index: int, want: _Pending, topic_cfg: dict | None = None) -> Partition:
        if topic_cfg is None:
            topic_cfg = self.topic_config(topic)
        plog = self.logs.get_or_create(topic, index, want.topic_id, topic_cfg, is_new=want.is_new)
        if want.leader == self.node_id:
            plog.assign_epoch(want.leader_epoch)
        part = Partition(topic, index, want.topic_id, plog, want.leader_epoch, topic_cfg)
        self._partitions[(topic, index)] = part
        for cb in self.on_partition_created:
            cb(part)
        hosted = self._hosted.pop((topic, index), None)
        if hosted is not None:
            hosted.set()   # (its waiters run once this metadata change or slice gave it its role)
        return part

    def make_pending(self, budget_s: float, clock=time.monotonic) -> list[Partition]:
        """Make the logs of queued partitions, oldest first, for about ``budget_s`` of this thread
        (at least one): the event loop serves between slices. Returns the partitions made."""
        made = []
        configs = {}
        tried = 0
        deadline = clock() + budget_s
        while self._pending and (not tried or clock() < deadline):
            tried += 1
            key = next(iter(self._pending))
            want = self._pending.pop(key)
            topic, index = key
            if topic not in configs:
                configs[topic] = self.topic_config(topic)
            part = self._make_or_fail(topic, index, want, configs[topic])
            if part is not None:
                made.append(part)
        return made

    def _make_or_fail(self, topic: str, index: int, want: _Pending,
                      topic_cfg: dict | None = None) -> Partition | None:
        """_make; a log the disk refused takes the partition offline and fails its directory
        (Kafka's LogManager.createLogDirectory / ReplicaManager.markPartitionOffline)."""
        try:
            return self._make(topic, index, want, topic_cfg)
        except (OSError, KafkaStorageError) as exc:
            self._offline[(topic, index)] = want.topic_id
            where = _log_dir_of(exc, topic, index)
            if where is not None:
                self._offline_dir[(topic, index)] = where
            if isinstance(exc, LogDirOffline):
                # its directory had failed already: that failure has had its line; a replica this
                # broker should have had, refused while a dir is offline, has not
                (log.info if want.is_new else log.warning)("%s-%s offline: %s", topic, index, exc.message)
                return None
            failed = self.on_log_failure is not None and self.on_log_failure(exc)
            # one line, no traceback (the failed directory has its own line, dir_failure.py)
            where = getattr(exc, "filename", None) or getattr(exc, "path", None)
            log.warning("making the log of %s-%s failed%s: %s; it answers KAFKA_STORAGE_ERROR%s", topic, index,
                        f" at {where}" if where else "", getattr(exc, "strerror", None) or exc,
                        "" if failed else " until a restart")
        except Exception:
            # not the disk's (a bug): this partition stays unhosted and answers
            # NOT_LEADER_OR_FOLLOWER; the next start makes it again
            log.exception("making the log of %s-%s failed", topic, index)
        return None

    def take_offline(self, dirs) -> list[tuple[str, int]]:
        """The partitions hosted in failed log directories go offline (Kafka's
        ReplicaManager.handleLogDirFailure, whatever failed the dir: an append, a flush, a log
        that could not be made there): they answer KAFKA_STORAGE_ERROR (missing_error), count
        in OfflineReplicaCount, and the log manager forgets their logs. The caller then drops
        their roles (replication) as for partitions no longer hosted. Returns them."""
        failed = {os.path.abspath(d) for d in dirs}
        gone = []
        for key, part in list(self._partitions.items()):
            where = os.path.dirname(os.path.abspath(part.log.dir))
            if where in failed:
                del self._partitions[key]
                self._offline[key] = part.topic_id
                self._offline_dir[key] = where
                gone.append(key)
        take = getattr(self.logs, "take_offline", None)
        for d in failed if take is not None else ():
            take(d)
        if gone:
            log.warning("stopped serving %d partitions in the failed log directories %s: %s", len(gone),
                        ", ".join(sorted(failed)),
                        ", ".join(f"{t}-{i}" for t, i in sorted(gone)[:20]) + (", ..." if len(gone) > 20 else ""))
        return gone

    def remove_strays(self) -> None:
        """Stale logs on disk for topics the image no longer has. Called once the image holds
        what the node should have had when it opened: logs made from now on are new ones."""
        self._opening = False
        for (topic, index) in list(self.logs.logs):
            if (topic != METADATA_TOPIC and (topic, index) not in self._partitions
                    and (topic, index) not in self._pending and (topic, index) not in self._offline):
                self.logs.delete_partition(topic, index)
                log.info("removed stray partition directory %s-%s", topic, index)

    def refresh_all_configs(self) -> int:
        """Every hosted partition's effective config again (a broker default changed, or the
        image was rebuilt): one walk, each topic's config computed once, and a log's config made
        again only where it changed. refresh_configs per topic walked every partition per topic
        (10,000 x 100 at 10,000 partitions: 0.5-0.7 s on the event loop after each rebuilt
        image). Returns how many partitions changed."""
        configs: dict[str, dict] = {}
        changed = 0
        for (topic, _i), part in self._partitions.items():
            cfg = configs.get(topic)
            if cfg is None:
                cfg = configs[topic] = self.topic_config(topic)
            if part.config != cfg:
                part.update_config(cfg)
                changed += 1
        return changed

    def refresh_configs(self, topic: str) -> None:
        cfg = self.topic_config(topic)
        for (t, _i), part in self._partitions.items():
            if t == topic:
                part.update_config(cfg)


def _log_dir_of(exc: BaseException, topic: str, index: int) -> str | None:
    """The log dir a partition's log failed to be made in: the parent of its directory
    `<topic>-<index>` in the failed path (an OSError's filename, a KafkaStorageError's path)."""
    path = getattr(exc, "filename", None) or getattr(exc, "path", None)
    if not isinstance(path, str) or not path:
        return None
    path, name = os.path.abspath(path), f"{topic}-{index}"
    for _ in range(3):   # the partition's directory, or a file in it
        if os.path.basename(path) == name:
            return os.path.dirname(path)
        path = os.path.dirname(path)
    return None
