"""Share groups (KIP-932, queues): share-partition state (`partition.py`) and share-group membership
(`membership.py`), pure state machines; the handlers and coordinator shells drive them."""
