"""Cluster metadata: KRaft metadata records, the log they live in, and the in-memory image
replayed from it.

    image           MetadataImage: topics, partitions, brokers, configs, ACLs, features...
    log             MetadataLog: `__cluster_metadata-0`, append and replay
    serde           metadata records <-> bytes
    control         KRaft control records (LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters)
    snapshots       `<offset>-<epoch>.checkpoint` snapshot files and bootstrap.checkpoint
    snapshotter     Snapshotter: when to write a snapshot of the image, and the newest one to load
    retention       the metadata log's own retention (snapshots and segments it no longer needs)
    raft_metrics    kafka.server:type=raft-metrics and the windowed stats behind them
    directory_id    log directory ids (KIP-858) and the metadata cache's offline-dir question
    topic_names     Kafka's topic-name rules
    internal_topics the internal topics Kafka creates on demand, with their configs
"""
