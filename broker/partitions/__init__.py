"""The partitions this broker hosts, as state beside their logs:

    partition       one partition's log plus leader epoch, high watermark, last stable offset
                    and the fetchers waiting for its next append
    replicas        ReplicaManager: the set of open partitions kept in step with the metadata image
    producers       idempotent and transactional producer state per partition
    fetch_sessions  incremental fetch sessions (KIP-227) over sets of partitions

Storage (broker/storage/) keeps the bytes; replication (broker/replication/) moves the high
watermark and ISR of these objects."""
