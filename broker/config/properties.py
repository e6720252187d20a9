"""Java `.properties` files, parsed the way java.util.Properties.load reads them.

Kafka reads server.properties with Properties.load, so the same file must mean the same here:
`#`/`!` comment lines, `key=value`, `key: value` and `key value`, a trailing odd backslash
continuing the line (leading whitespace of the next line dropped), and the escapes \\t \\n \\r \\f
\\uXXXX and \\<any char>. Values keep trailing whitespace, as in Java. Files are read as UTF-8
(Java's InputStream overload would read ISO-8859-1; \\uXXXX escapes mean the same either way).
"""
from __future__ import annotations

import os

from broker.config.types import ConfigError

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str):
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        natural = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not natural or natural[0] in "#!":
            continue
        parts = []
        while _ends_with_odd_backslashes(natural):
            parts.append(natural[:-1])
            if i >= len(lines):
                natural = ""
                break
            natural = lines[i].lstrip(_WHITESPACE)
            i += 1
        parts.append(natural)
        yield "".join(parts)


def _ends_with_odd_backslashes(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            code = s[i + 2:i + 6]
            if len(code) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in code):
                raise ConfigError("Malformed \\uxxxx encoding.")
            out.append(chr(int(code, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return _unescape(key), _unescape(rest)


def parse_properties(text: str) -> dict[str, str]:
    """Key/value pairs of a .properties text, in file order; a repeated key keeps its last value."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key_value(line)
        props.pop(key, None)
        props[key] = value
    return props


def load_properties(path: str | os.PathLike) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return parse_properties(f.read())
