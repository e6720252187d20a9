"""The classic group coordinator: consumer group membership (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup) and committed offsets, stored in the
`__consumer_offsets` topic in Kafka's record layout.

- `state.GroupStateMachine`: the pure state machine (requests and timer
  ticks in, with an explicit `now_ms`; responses, records and timers out).
- `coordinator.GroupCoordinator`: the trio shell that drives it for the broker.
"""
from broker.groups.placement import OFFSETS_TOPIC, java_string_hashcode, partition_for

__all__ = ["OFFSETS_TOPIC", "java_string_hashcode", "partition_for"]
