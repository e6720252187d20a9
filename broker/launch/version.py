"""kproto's version (a checkout's pyproject.toml, else the installed package's) and the Kafka
version whose protocol and behaviour it follows."""
from __future__ import annotations

import os
import re

KAFKA_VERSION = "3.9"


def _checkout_version() -> str | None:
    """pyproject.toml's version when this package runs from a kproto checkout (an editable
    install's metadata is the version at install time; the file is the one in force)."""
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(checkout, "pyproject.toml")) as f:
            text = f.read()
    except OSError:
        return None
    if not re.search(r'^name\s*=\s*"kproto"', text, re.M):
        return None   # someone else's pyproject.toml next to an installed package
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    return m.group(1) if m else None


def _version() -> str:
    # the file first: importlib.metadata costs a start-up ~20-30 ms of CPU (its imports and a
    # scan of sys.path for the distribution), for the ready line of every `kproto serve`
    found = _checkout_version()
    if found:
        return found
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            return version("kproto")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    return "unknown"


VERSION = _version()
