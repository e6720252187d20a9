"""The I/O side of the KRaft metadata quorum: Kafka's on-disk files (quorum-state, snapshots,
bootstrap.checkpoint), storage formatting, and the settings the raft/ state machine runs with.

    control      KRaft control records (LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters)
    snapshots    `<offset>-<epoch>.checkpoint` snapshot files and bootstrap.checkpoint
    state_file   the `quorum-state` file
    formatter    `kproto storage format` (Kafka's Formatter): meta.properties and bootstrap files
"""
