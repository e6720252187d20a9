"""Config value types, parsing and rendering, with Kafka's ConfigDef semantics and messages.

Kafka parses every config value from a string (ConfigDef.parseType) and renders it back
(ConfigDef.convertToString) for DescribeConfigs; clients compare these strings, so the rules
here follow Java's Integer/Long/Double parsing and Double.toString formatting.
"""
from __future__ import annotations

import enum
import math
import re
from decimal import Decimal

from kproto.errors import ErrorCode


class ConfigType(enum.IntEnum):
    """DescribeConfigs ConfigType codes (and ConfigDef.Type names)."""
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ConfigSource codes."""
    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigError(ValueError):
    """A config rejected the way Kafka rejects it: `message` is Kafka's wording, `error_code` the
    error a request handler answers with (INVALID_CONFIG unless said otherwise)."""

    def __init__(self, message: str, error_code: int = ErrorCode.INVALID_CONFIG):
        super().__init__(message)
        self.message = message
        self.error_code = ErrorCode(error_code)


def invalid_value(name: str, value, message: str | None) -> ConfigError:
    """Kafka's ConfigException(name, value, message) wording."""
    rendered = java_str(value)
    return ConfigError(f"Invalid value {rendered} for configuration {name}"
                       + ("" if message is None else f": {message}"))


class Password:
    """A PASSWORD value; never printed (Kafka's Password.toString is "[hidden]")."""
    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value

    def __repr__(self) -> str:
        return "[hidden]"

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


_INT_RANGES = {
    ConfigType.SHORT: (-(1 << 15), (1 << 15) - 1),
    ConfigType.INT: (-(1 << 31), (1 << 31) - 1),
    ConfigType.LONG: (-(1 << 63), (1 << 63) - 1),
}
# Integer.parseInt / Long.parseLong: optional sign, ASCII digits, nothing else.
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
# Double.parseDouble (FloatingDecimal): decimal or hex significand, optional f/d suffix.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|"
    r"(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)\Z")
# Csv-style list split of ConfigDef: commas with surrounding whitespace, empty items kept.
_COMMA_WITH_WHITESPACE = re.compile(r"\s*,\s*")
# A Java binary class name; we cannot load classes, so a well-formed name stands in for one.
_JAVA_CLASS_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*\Z")


def java_trim(s: str) -> str:
    """String.trim(): strips every char <= U+0020 (Python's strip() takes a different set)."""
    i, j = 0, len(s)
    while i < j and s[i] <= " ":
        i += 1
    while j > i and s[j - 1] <= " ":
        j -= 1
    return s[i:j]


def parse_value(name: str, type_: ConfigType, raw: str | None):
    """ConfigDef.parseType for a string input: the typed value or ConfigError with Kafka's message.

    Typed values: bool, str, int, float, list[str], Password; CLASS stays the class name (str).
    """
    if raw is None:
        return None
    trimmed = java_trim(raw)
    if type_ is ConfigType.BOOLEAN:
        low = trimmed.lower()
        if low == "true":
            return True
        if low == "false":
            return False
        raise invalid_value(name, raw, "Expected value to be either true or false")
    if type_ is ConfigType.STRING:
        return trimmed
    if type_ is ConfigType.PASSWORD:
        return Password(trimmed)
    if type_ in _INT_RANGES:
        lo, hi = _INT_RANGES[type_]
        if _JAVA_INTEGER.match(trimmed):
            n = int(trimmed)
            if lo <= n <= hi:
                return n
        raise invalid_value(name, raw, f"Not a number of type {type_.name}")
    if type_ is ConfigType.DOUBLE:
        if _JAVA_DOUBLE.match(trimmed):
            return _java_parse_double(trimmed)
        raise invalid_value(name, raw, f"Not a number of type {type_.name}")
    if type_ is ConfigType.LIST:
        return [] if not trimmed else _COMMA_WITH_WHITESPACE.split(trimmed)
    if type_ is ConfigType.CLASS:
        if _JAVA_CLASS_NAME.match(trimmed):
            return trimmed
        raise invalid_value(name, raw, f"Class {raw} could not be found.")
    raise ValueError(f"cannot parse values of type {type_!r}")


def _java_parse_double(s: str) -> float:
    body = s[:-1] if s[-1] in "fFdD" and "x" not in s.lower() else s
    if "x" in body.lower():
        if body[-1] in "fFdD":
            body = body[:-1]
        sign = -1.0 if body.startswith("-") else 1.0
        return sign * float.fromhex(body.lstrip("+-"))
    return float(body.replace("Infinity", "inf"))


def java_double_str(d: float) -> str:
    """Double.toString: plain notation for 1e-3 <= |d| < 1e7, else d.dddE<n>."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    sign = "-" if d < 0 else ""
    t = Decimal(repr(abs(d))).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    exp10 = len(digits) + t.exponent - 1
    if 1e-3 <= abs(d) < 1e7:
        if exp10 >= 0:
            int_part = digits[:exp10 + 1].ljust(exp10 + 1, "0")
            frac = digits[exp10 + 1:] or "0"
        else:
            int_part, frac = "0", "0" * (-exp10 - 1) + digits
        return f"{sign}{int_part}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp10}"


def java_str(value) -> str:
    """Object.toString of a parsed value, as Kafka puts it into messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return java_double_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(java_str(v) for v in value) + "]"
    return str(value)


def to_kafka_string(type_: ConfigType, value) -> str | None:
    """ConfigDef.convertToString: the string DescribeConfigs shows for a parsed value."""
    if value is None:
        return None
    if type_ is ConfigType.LIST:
        return ",".join(java_str(v) for v in value)
    return java_str(value)


class StartupError(Exception):
    """A start-up failure with its one-line explanation (printed alone by `kproto serve`,
    exit code 1: broker/launch/startup_errors.py)."""
