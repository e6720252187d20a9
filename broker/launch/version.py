"""kproto's version (the installed package's, else pyproject.toml's) and the
Kafka version whose protocol and behaviour it follows."""
from __future__ import annotations

import os
import re

KAFKA_VERSION = "3.9"


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("kproto")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(checkout, "pyproject.toml")
    try:
        with open(path) as f:
            m = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.M)
        return m.group(1) if m else "unknown"
    except OSError:
        return "unknown"


VERSION = _version()
