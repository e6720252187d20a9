"""The object store tiered storage writes to, chosen by the `rsm.config.` settings (object_store.py)."""
from .object_store import ObjectNotFound, ObjectStoreError, open_store  # noqa: F401
