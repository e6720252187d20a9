"""Hypothesis strategies that build random valid messages for one version,
driven by the generated classes' _schema tables."""
from __future__ import annotations

import sys
import uuid

from hypothesis import strategies as st

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}


def _in(span, v):
    return span is not None and span[0] <= v <= span[1]


def _prim(t: str):
    if t in INT_RANGES:
        return st.integers(*INT_RANGES[t])
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return st.builds(lambda b: uuid.UUID(bytes=b), st.binary(min_size=16, max_size=16))
    raise KeyError(t)


def message(cls, version: int, flexible: bool, depth: int = 0):
    """A strategy for instances of cls valid at version (fields absent in that
    version keep their defaults)."""
    module = sys.modules[cls.__module__]
    kwargs = {}
    for attr, _name, typ, versions, nullable, _tagged, _tag in cls._schema:
        if not _in(versions, version):
            continue
        is_array = typ.startswith("[]")
        elem = typ[2:] if is_array else typ
        if elem in INT_RANGES or elem in ("bool", "float64", "string", "bytes", "records", "uuid"):
            base = _prim(elem)
        else:
            if depth > 3:
                continue
            base = message(getattr(module, elem), version, flexible, depth + 1)
        strat = st.lists(base, max_size=3) if is_array else base
        if _in(nullable, version):
            strat = st.one_of(st.none(), strat)
        kwargs[attr] = strat
    return st.builds(cls, **kwargs)
