"""The controller's decisions: how a request becomes metadata records, as Kafka 3.9's
QuorumController managers decide it, with no I/O of their own.

    controller     Controller: topics, partitions, configs, internal topics and the broker list
                   (ReplicationControlManager, ConfigurationControlManager)
    registration   broker registration and fencing rules (ClusterControlManager,
                   BrokerHeartbeatManager)
    log_dirs       log directories in the metadata (KIP-858): assignment and failed dirs
    features       supported and finalized feature levels (FeatureControlManager)
    producer_ids   producer-id blocks (ProducerIdControlManager)

A single node appends what these return to its metadata log; a multi-node quorum
(broker/quorum/) proposes it to raft. Either way records become state only by being replayed
into the image (broker/metadata/)."""
