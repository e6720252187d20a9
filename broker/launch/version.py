"""kproto's version and the Kafka version whose protocol and behaviour it follows.

VERSION is the one place the version is written: pyproject.toml's build reads it from this file
(setuptools' `attr`, without importing the package), so neither an installed broker nor a
checkout looks it up at start-up (importlib.metadata costs ~10-20 ms of CPU: its imports and a
scan of sys.path for the distribution's metadata)."""
from __future__ import annotations

VERSION = "0.1.0"
KAFKA_VERSION = "3.9"
