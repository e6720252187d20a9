"""Bytes on sockets, below everything that speaks Kafka: Kafka's size-prefixed frames (`framing`)
and a client connection's socket I/O with sendfile for record bytes (`transport`), with the
errors that end a connection (`ConnectionClosed`, `FrameTooLarge`, `CloseConnection`). It imports
nothing else of broker/, so TLS (security/), the replica fetchers (replication/) and the raft
shell (quorum/) all build on it."""
