"""Cluster metadata: KRaft metadata records, the log they live in, and the
in-memory image replayed from it."""
