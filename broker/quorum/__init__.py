"""The KRaft metadata quorum in a `kproto serve` process: the I/O shell around raft/'s pure state
machine, its files, and the controller's runtime on top of it.

    shell            QuorumShell: sockets, timers and storage for raft.node.RaftNode
    raft_storage     the raft log and snapshots on disk as raft/ sees them
    state_file       the `quorum-state` file
    formatter        `kproto storage format` (Kafka's Formatter): meta.properties and bootstrap files
    startup          storage checks at start-up (formatted, one cluster)
    leadership       a one-voter quorum's election at start
    replicated       ReplicatedMetadata: committed records into the image, proposals, forwarding
    liveness         broker heartbeats, fencing, producer-id blocks over the controller listener
    shutdown         controlled shutdown (broker and controller side)
    controller_apis  what the controller listener answers (ControllerRegistration, DescribeCluster...)
    sole_controller  the controller listener of a node that is its quorum's only voter
    secure           TLS, SASL and CLUSTER_ACTION on the controller listener
    scram_bootstrap  SCRAM credentials written at format time
"""
