"""Tiered storage (KIP-405): closed log segments copied to an object store (a local directory, S3
or another cloud store) and read back from it when a fetch asks for offsets no longer on disk.

The object stores (`object_store.py`: local directory, S3 via obstore), CRC checks of data read
back and retry backoff; the remote log manager of this broker (`manager.py`, a trio task that
copies closed segments of `remote.storage.enable` topics, expires them by total retention and
deletes them with their topic), the remote segment metadata kept in Kafka's
`__remote_log_metadata` topic with Kafka's record layouts (`metadata_records.py`), the
per-partition view built from it (`segment_view.py`, Kafka's RemoteLogMetadataManager), the pure
decisions of what to copy and what to expire (`planner.py`), and reads of offsets that are only
remote (`remote_read.py`, `fetch.py`, `offsets.py`)."""
