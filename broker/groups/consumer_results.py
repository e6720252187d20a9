"""What the KIP-848 consumer-group inputs of the group state machine answer
(broker/groups/consumer_state.py). A module of its own, imported at the first
such answer: a node whose clients use only classic groups never builds these
dataclasses (start-up CPU, issue 26)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HeartbeatResult:
    """ConsumerGroupHeartbeat's answer to one member."""
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: dict | None = None                  # topic id -> sorted partitions, or None


@dataclass
class DescribedMember:
    """One member as ConsumerGroupDescribe describes it."""
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list
    subscribed_topic_regex: str | None
    assignment: dict
    target: dict
    classic: bool = False      # joined with the classic protocol (ConsumerGroupDescribe v1's MemberType)


@dataclass
class DescribedConsumerGroup:
    """One group as ConsumerGroupDescribe describes it."""
    group_id: str
    error: int
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: list = field(default_factory=list)
