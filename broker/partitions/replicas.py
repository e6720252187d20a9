"""The partitions this broker hosts, kept in step with the metadata image:
after every metadata change the set of open partition logs is reconciled
with the topics the image holds."""
from __future__ import annotations

import logging

from broker.config import TopicConfig
from broker.metadata.log import METADATA_TOPIC
from broker.partitions.partition import Partition

log = logging.getLogger("kproto.replicas")


class ReplicaManager:
    def __init__(self, node_id: int, image, log_manager, broker_config):
        self.node_id = node_id
        self.image = image
        self.logs = log_manager
        self.config = broker_config
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.on_partition_created = []  # callbacks(partition)
        # Directories on disk that the image does not name are removed only once the image is
        # complete: a node of a multi-voter quorum opens with an empty image that catches up with
        # the committed log, and removing "strays" then would wipe every partition it hosts (as
        # Kafka, which deletes stray logs only once the broker has caught up with the metadata).
        self.strays_allowed = True

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def all(self):
        return self._partitions.values()

    def topic_config(self, topic: str) -> dict:
        t = self.image.topics.get(topic)
        values = TopicConfig(self.config, t.configs if t else {}).as_dict()
        return {k: (",".join(v) if isinstance(v, list) else v) for k, v in values.items()}

    def reconcile(self, _records=None) -> None:
        wanted = {}
        for t in self.image.topics.values():
            for p in t.partitions.values():
                if self.node_id in p.replicas:
                    wanted[(t.name, p.partition)] = (t, p)
        # deleted topics (and partitions of a topic re-created under a new id)
        for key, part in list(self._partitions.items()):
            entry = wanted.get(key)
            if entry is None or entry[0].topic_id != part.topic_id:
                del self._partitions[key]
                self.logs.delete_partition(*key)
                log.info("removed partition %s-%s", *key)
        for t in self.image.topics.values():
            topic_cfg = None
            for p in t.partitions.values():
                key = (t.name, p.partition)
                if key not in wanted:
                    continue
                existing = self._partitions.get(key)
                if existing is not None:
                    if existing.leader_epoch != p.leader_epoch:
                        existing.leader_epoch = p.leader_epoch
                        if p.leader == self.node_id:   # a follower's epochs come from its leader's batches
                            existing.log.assign_epoch(p.leader_epoch)
                    continue
                if topic_cfg is None:
                    topic_cfg = self.topic_config(t.name)
                plog = self.logs.get_or_create(t.name, p.partition, t.topic_id, topic_cfg)
                if p.leader == self.node_id:
                    plog.assign_epoch(p.leader_epoch)
                part = Partition(t.name, p.partition, t.topic_id, plog, p.leader_epoch, topic_cfg)
                self._partitions[key] = part
                for cb in self.on_partition_created:
                    cb(part)
        if self.strays_allowed:
            self.remove_strays()

    def remove_strays(self) -> None:
        """Stale logs on disk for topics the image no longer has."""
        for (topic, index) in list(self.logs.logs):
            if topic != METADATA_TOPIC and (topic, index) not in self._partitions:
                self.logs.delete_partition(topic, index)
                log.info("removed stray partition directory %s-%s", topic, index)

    def refresh_configs(self, topic: str) -> None:
        cfg = self.topic_config(topic)
        for (t, _i), part in self._partitions.items():
            if t == topic:
                part.update_config(cfg)
