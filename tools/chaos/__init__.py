"""Jepsen-style fault injection for Kafka-protocol clusters: real clients
record a history of what they did and saw while nemeses kill, pause,
partition and slow the nodes; checkers then look for lost, duplicated,
reordered, aborted or uncommitted records. See docs/chaos.md."""
