"""Kafka's topic-name rules, with its error messages."""
from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def invalid_reason(name: str | None) -> str | None:
    """None when the name is legal, else Kafka's message."""
    if name is None or name == "":
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > MAX_NAME_LENGTH:
        return (f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
                f"length {MAX_NAME_LENGTH}")
    if not _LEGAL.fullmatch(name):
        return (f"Topic name is invalid: '{name}' contains one or more characters other than "
                "ASCII alphanumerics, '.', '_' and '-'")
    return None


def collision_key(name: str) -> str:
    """Topics whose names differ only in '.' versus '_' collide in metric names."""
    return name.replace(".", "_")
