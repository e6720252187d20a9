"""JAAS configuration text as Kafka reads it from `sasl.jaas.config`:
`<LoginModule> <flag> key="value" ... ;` (Kafka's JaasConfig parser)."""
from __future__ import annotations

import re

from broker.config.types import ConfigError

_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|([^\s=;"]+)|(=)|(;))', re.S)


def parse_jaas(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """[(login module class, control flag, options)]."""
    tokens = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise ConfigError(f"Invalid JAAS config: unexpected text at {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group(1) is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", m.group(1))))
        elif m.group(2) is not None:
            tokens.append(("word", m.group(2)))
        elif m.group(3):
            tokens.append(("=", "="))
        else:
            tokens.append((";", ";"))
    modules = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise ConfigError("Invalid JAAS config: expected '<LoginModule> <flag>'")
        module, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in ("required", "requisite", "sufficient", "optional"):
            raise ConfigError(f"Invalid JAAS config: invalid control flag {tokens[i + 1][1]}")
        i += 2
        options = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i + 1][0] != "=":
                raise ConfigError("Invalid JAAS config: expected key=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError("Invalid JAAS config: a login module must end with ';'")
        i += 1
        modules.append((module, flag, options))
    if not modules:
        raise ConfigError("JAAS config entry not terminated by semi-colon")
    return modules
