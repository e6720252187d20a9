"""Which hosted partitions a run of metadata records may have changed, for the broker's
reconcile after each metadata change (Kafka's ReplicaManager.applyDelta looks only at the
topics delta's partitions too).

Walking every partition per change cost tens of milliseconds per commit at 10,000 partitions,
and a leadership change of thousands comes as several commits (the elections, then the ISR
changes); so the broker's reconcile now visits what the records name. It still walks everything
when a record can change more than the partitions it names: a topic removed (its partitions and
strays go), this broker's own registration (whether it may lead at all), a record type this
module does not know, or an image rebuilt or loaded without records (an empty or absent list)."""
from __future__ import annotations

from collections.abc import Iterable

# records naming one partition: only it changes
_PARTITION = ("PartitionRecord", "PartitionChangeRecord")
# records of a broker's registration: a role change only for this broker's own
_REGISTRATION = ("RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord",
                 "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord")
# records that change no partition's hosting or role (a topic's configs reach its partitions
# through ReplicaManager.refresh_configs; the partitions of a new topic come in PartitionRecords)
_NONE = ("TopicRecord", "ConfigRecord", "ProducerIdsRecord", "UserScramCredentialRecord",
         "RemoveUserScramCredentialRecord", "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
         "ClientQuotaRecord", "DelegationTokenRecord", "RemoveDelegationTokenRecord",
         "RegisterControllerRecord", "NoOpRecord")


class PartitionDelta:
    """Partitions named by the records applied since the last take(); None: walk them all.
    ``elections``: for the active controller's election sweep, which any broker's registration
    and the unclean election configs change for every partition."""

    def __init__(self, node_id: int, elections: bool = False):
        self.node_id = node_id
        self.elections = elections
        # a dict, not a set: the reconcile makes new logs in the records' order (partition 0, 1,
        # ...), which places them across log dirs as a full walk does; a set's order is a hash's
        self._keys: dict[tuple[str, int], None] | None = None   # the first reconcile walks everything

    def add(self, records, image) -> None:
        """Records just applied to ``image`` (empty: the image was rebuilt)."""
        if self._keys is None:
            return
        if not records:
            self._keys = None
            return
        keys = self._keys
        by_id = image.topics_by_id
        for r in records:
            kind = type(r).__name__
            if kind in _PARTITION:
                t = by_id.get(r.topic_id)
                if t is not None:   # (a topic removed since is a RemoveTopicRecord: a full walk)
                    keys[(t.name, r.partition_id)] = None
            elif kind in _NONE and not (self.elections and kind == "ConfigRecord"):
                continue
            elif kind in _REGISTRATION and not self.elections and getattr(r, "broker_id", getattr(r, "id", None)) != self.node_id:
                continue   # (Fence/UnfenceBrokerRecord name it "id")
            else:
                self._keys = None
                return

    def add_keys(self, keys: Iterable[tuple[str, int]]) -> None:
        if self._keys is not None:
            self._keys.update(dict.fromkeys(keys))

    def take(self) -> dict[tuple[str, int], None] | None:
        """The partitions to visit now, in the order named (None: every one), and start a new delta."""
        keys, self._keys = self._keys, {}
        return keys
