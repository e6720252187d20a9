"""Tiered storage (KIP-405): closed log segments copied to an object store (a local directory, S3
or another cloud store) and read back from it when a fetch asks for offsets no longer on disk."""
