"""IncrementalAlterConfigs and AlterConfigs applied to a topic's override set.

Mirrors Kafka's two steps: the broker's preprocessing (duplicate keys and null values are
INVALID_REQUEST) and the controller's (apply the operations, then validate the resulting
override set as a whole; INVALID_CONFIG). Checking that the topic exists is the caller's job;
Kafka's controller does it after validation.
"""
from __future__ import annotations

import enum
from typing import Iterable, Mapping

from broker.config.broker_config import BrokerConfig
from broker.config.catalog import TOPIC_CONFIGS
from broker.config.topic_config import validate_topic_config
from broker.config.types import ConfigError, ConfigType
from kproto.errors import ErrorCode


class OpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def apply_incremental(current: Mapping[str, str], ops, list_op, error) -> dict[str, str]:
    """IncrementalAlterConfigs operations (name, op, value) on a copy of `current`: SET and DELETE
    alike for every resource type; APPEND and SUBTRACT through list_op(new, name, op, value), which
    changes `new` or raises; an unknown operation raises error(INVALID_REQUEST, message)."""
    new = dict(current)
    for name, op, value in ops:
        if op == OpType.SET:
            new[name] = value
        elif op == OpType.DELETE:
            new.pop(name, None)
        elif op in (OpType.APPEND, OpType.SUBTRACT):
            list_op(new, name, op, value)
        else:
            raise error(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op}")
    return new


def incremental_without_lists(current: Mapping[str, str], ops) -> dict[str, str]:
    """The overrides of a resource none of whose keys is a LIST (client metrics, groups) after
    IncrementalAlterConfigs operations (name, op, value), as Kafka's ConfigurationControlManager
    applies them: SET and DELETE; APPEND and SUBTRACT always fail."""
    from kproto.errors import KafkaError

    def no_lists(_new, name, op, _value):
        raise KafkaError(ErrorCode.INVALID_CONFIG,
                         f"Can't {OpType(op).name} to key {name} because its type is not LIST.")
    return apply_incremental(current, ops, no_lists, KafkaError)


def _check_request(names: list[str], null_names: list[str]) -> None:
    if len(set(names)) != len(names):
        raise ConfigError("Error due to duplicate config keys", ErrorCode.INVALID_REQUEST)
    if null_names:
        raise ConfigError("Null value not supported for : " + ", ".join(null_names), ErrorCode.INVALID_REQUEST)


def _java_split(value: str) -> list[str]:
    parts = value.split(",")
    while parts and parts[-1] == "":    # String.split drops trailing empty strings
        parts.pop()
    return parts


def _list_parts(value: str | None, name: str) -> list[str]:
    # an unset list starts from the topic config's own default, not the broker's value
    if value is None:
        value = TOPIC_CONFIGS[name].default
    return [p for p in (value or "").split(",") if p]


def incremental_alter_topic_configs(broker: BrokerConfig, current: Mapping[str, str],
                                    ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """Apply (name, op, value) operations to a topic's overrides; return the new override set.

    Raises ConfigError (INVALID_REQUEST or INVALID_CONFIG, with Kafka's message) and leaves
    `current` untouched on any error.
    """
    ops = list(ops)
    _check_request([n for n, _, _ in ops], [n for n, op, v in ops if op != OpType.DELETE and v is None])
    def list_op(new, name, op, value):
        key = TOPIC_CONFIGS.get(name)
        if key is None or key.type is not ConfigType.LIST:
            raise ConfigError(f"Can't {OpType(op).name} to key {name} because its type is not LIST.")
        parts = _list_parts(new.get(name), name)
        if op == OpType.APPEND:
            for p in _java_split(value):
                if p not in parts:
                    parts.append(p)
        else:
            for p in _java_split(value):
                if p in parts:
                    parts.remove(p)
        new[name] = ",".join(parts)
    new = apply_incremental(current, ops, list_op, lambda code, message: ConfigError(message, code))
    validate_topic_config(broker, new, existing=current)
    return new


def alter_topic_configs(broker: BrokerConfig, current: Mapping[str, str],
                        configs: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """Legacy AlterConfigs: the given (name, value) pairs replace every override of the topic."""
    configs = list(configs)
    _check_request([n for n, _ in configs], [n for n, v in configs if v is None])
    new = dict(configs)
    validate_topic_config(broker, new, existing=current)
    return new
