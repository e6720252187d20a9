"""Structured, quiet-by-default logging: one line per event, key=value."""
from __future__ import annotations

import logging
import sys
import time


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        msg = record.getMessage().replace("\n", " ")
        line = f'ts={ts}.{int(record.msecs):03d}Z level={record.levelname.lower()} logger={record.name} msg="{msg}"'
        if record.exc_info:
            line += " exc=" + repr(self.formatException(record.exc_info).replace("\n", " | "))
        return line


def setup(level: str = "WARNING") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
