"""Partition replication as Kafka 3.9 does it.

Controller side (pure, no I/O): replica placement (placement.py), leader
election and ISR changes on broker fencing / controlled shutdown
(election.py), AlterPartition validation (alter_partition.py).
Broker side: the leader's view of its followers, the high watermark and ISR
shrink/expand decisions (leader_state.py), acks=all waits (acks.py) and the
follower's handling of its fetch answers (follower.py).
"""
