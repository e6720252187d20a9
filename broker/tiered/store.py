"""The object store tiered storage writes to, chosen by the `rsm.config.` settings."""
from ._local_store_stub import ObjectNotFound, ObjectStoreError, open_store  # noqa: F401
