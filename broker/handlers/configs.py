"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for TOPIC and BROKER resources.

Follows Kafka 3.9 in KRaft mode: the broker's preprocessing (duplicate resources and keys, null
values, broker resource names, broker config validation; ConfigAdminManager), then the
controller's (topic name, the resulting override set, topic existence; ConfigurationControlManager).
Changes become ConfigRecords in the metadata log: topic overrides under the topic's name, dynamic
broker configs under resource type BROKER ("" for the cluster default, the node id for this broker),
so a restart replays both.
"""
from __future__ import annotations

import logging
import re

from kproto.api import ApiKey
from kproto.errors import ErrorCode, KafkaError
from kproto.messages.alter_configs_response import AlterConfigsResponse
from kproto.messages.alter_configs_response import AlterConfigsResourceResponse as LegacyResult
from kproto.messages.describe_configs_response import (
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult, DescribeConfigsSynonym)
from kproto.messages.incremental_alter_configs_response import AlterConfigsResourceResponse as IncrementalResult
from kproto.messages.incremental_alter_configs_response import IncrementalAlterConfigsResponse

from broker.config import (
    ConfigError, ConfigSource, ConfigType, OpType, alter_topic_configs, describe_broker_resource,
    describe_topic, incremental_alter_topic_configs)
from broker.config.alter import apply_incremental
from broker.config.catalog import BROKER_CONFIGS
from broker.handlers import handles
from broker.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from broker.metadata.topic_names import invalid_reason
from broker.share import group_configs

log = logging.getLogger("kproto.handlers.configs")

BROKER_LOGGER_RESOURCE = 8
CLIENT_METRICS_RESOURCE = 16
_RESOURCE_TYPE_NAMES = {TOPIC_RESOURCE: "TOPIC", BROKER_RESOURCE: "BROKER",
                        BROKER_LOGGER_RESOURCE: "BROKER_LOGGER", CLIENT_METRICS_RESOURCE: "CLIENT_METRICS"}
# Errors.INVALID_REQUEST's default message, which Kafka sends when a whole request fails
INVALID_REQUEST_MESSAGE = ("This most likely occurs because of a request being malformed by the client "
                           "library or the message was sent to an incompatible broker. See the broker logs "
                           "for more details.")


# -- DescribeConfigs ---------------------------------------------------------------------------

def _result_entry(e) -> DescribeConfigsResourceResult:
    return DescribeConfigsResourceResult(
        name=e.name, value=e.value, read_only=e.read_only, is_default=e.source is ConfigSource.DEFAULT_CONFIG,
        config_source=int(e.source), is_sensitive=e.is_sensitive,
        synonyms=[DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms],
        config_type=int(e.type),
        # kproto's config catalog carries no documentation strings: null, as when not asked for
        documentation=None)


def _describe_one(broker, resource, include_synonyms: bool) -> DescribeConfigsResult:
    rtype, name = resource.resource_type, resource.resource_name
    keys = resource.configuration_keys or None
    out = DescribeConfigsResult(error_code=0, error_message="", resource_type=rtype, resource_name=name,
                                configs=[])
    try:
        if rtype == TOPIC_RESOURCE:
            reason = invalid_reason(name)
            if reason:
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
            t = broker.image.topics.get(name)
            if t is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION   # message stays "", as Kafka's
                return out
            entries = describe_topic(broker.config, t.configs, include_synonyms=include_synonyms, keys=keys)
        elif rtype == BROKER_RESOURCE:
            entries = describe_broker_resource(broker.config, name, include_synonyms=include_synonyms, keys=keys)
        elif rtype == CLIENT_METRICS_RESOURCE:
            if not name:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
            stored = broker.image.configs.get((CLIENT_METRICS_RESOURCE, name), {})
            out.configs = [DescribeConfigsResourceResult(
                name=k, value=v, read_only=False, config_source=int(ConfigSource.CLIENT_METRICS_CONFIG),
                is_sensitive=False, synonyms=[], config_type=int(ConfigType.UNKNOWN), documentation=None)
                for k, v in stored.items() if keys is None or k in keys]
            return out
        else:
            # BROKER_LOGGER (log4j levels) has no counterpart here
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unsupported resource type: {_RESOURCE_TYPE_NAMES.get(rtype, 'UNKNOWN')}")
    except ConfigError as exc:
        out.error_code, out.error_message = exc.error_code, exc.message
        return out
    except KafkaError as exc:
        out.error_code, out.error_message = exc.code, exc.message
        return out
    out.configs = [_result_entry(e) for e in entries]
    return out


@handles(ApiKey.DESCRIBE_CONFIGS, 0, 4)
async def describe_configs(ctx, req):
    broker = ctx.broker
    include_synonyms = bool(ctx.api_version >= 1 and req.include_synonyms)
    known = (TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE)
    if any(r.resource_type not in known for r in req.resources):
        # Kafka fails the whole request (authorization cannot classify the resource)
        return DescribeConfigsResponse(throttle_time_ms=0, results=[
            DescribeConfigsResult(error_code=ErrorCode.INVALID_REQUEST, error_message=INVALID_REQUEST_MESSAGE,
                                  resource_type=r.resource_type, resource_name=r.resource_name, configs=[])
            for r in req.resources])
    results = [_describe_one(broker, r, include_synonyms) for r in req.resources]
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


# -- alter: shared steps -----------------------------------------------------------------------

def _check_node_id(ctx, name: str) -> int:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId, with its messages: the broker a
    client sends a per-broker change to checks it is its own. A request another broker forwarded
    to this active controller was checked there: any node id is accepted (as Kafka's controller,
    which only checks that the name is a number)."""
    broker = ctx.broker
    if not (re.fullmatch(r"[+-]?[0-9]+", name) and -(1 << 31) <= int(name) < (1 << 31)):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
    if int(name) != broker.node_id and not getattr(ctx.conn, "forwarded", False):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker.node_id}, but received {name}")
    return int(name)


def _alter_broker(ctx, name: str, layer_for, validate_only: bool) -> None:
    """A BROKER resource: "" (the cluster default), this broker, or (forwarded) another broker;
    `layer_for(stored)` is the resulting dynamic layer."""
    broker = ctx.broker
    node_id = _check_node_id(ctx, name) if name else None
    if node_id is not None and node_id != broker.node_id:
        layer = layer_for(broker.controller.stored_broker_configs(node_id))
        broker.controller.alter_other_broker_configs(node_id, layer, validate_only)
        return
    layer = layer_for(broker.controller.dynamic_broker_configs(node_id is not None))
    _apply_broker_layer(broker, name, layer, validate_only)


def _check_request(configs, is_null) -> None:
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in configs if is_null(c)]
    if nulls:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))


def _check_topic_name(name: str) -> None:
    # ControllerConfigurationValidator.validateTopicName
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    reason = invalid_reason(name)
    if reason:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)


def _apply_topic_overrides(broker, name: str, current: dict, new: dict, validate_only: bool) -> None:
    if name not in broker.image.topics:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    if validate_only:
        return
    changes: dict[str, str | None] = {k: None for k in current if k not in new}
    changes.update({k: v for k, v in new.items() if current.get(k) != v})
    if changes:
        broker.controller.set_configs(TOPIC_RESOURCE, name, changes)
        broker.partitions.refresh_configs(name)


def _apply_broker_layer(broker, name: str, new: dict, validate_only: bool) -> None:
    broker.controller.alter_broker_configs(bool(name), new, validate_only=validate_only)
    if not validate_only:
        # dynamic log.* settings are the defaults of every topic without an override
        broker.partitions.refresh_all_configs()


def _java_split(value: str) -> list[str]:
    """Java's String.split(","): no separator gives the string itself, else trailing empty
    strings are dropped."""
    if "," not in value:
        return [value]
    parts = value.split(",")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _broker_list_value(current: dict, name: str) -> str | None:
    value = current.get(name)
    return BROKER_CONFIGS[name].default if value is None else value


def _incremental_broker_layer(current: dict, ops) -> dict:
    """ConfigAdminManager.prepareIncrementalConfigs on the stored dynamic layer."""
    def list_op(new, name, op, value):
        key = BROKER_CONFIGS.get(name)
        if key is None:
            # Kafka looks the key up in a Scala map that throws: an unexpected error, no message
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR)
        verb = "append" if op == OpType.APPEND else "subtract"
        if key.type is not ConfigType.LIST:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
        old = _broker_list_value(new, name)
        if op == OpType.APPEND:
            parts = _java_split(old) if old else []
            parts += [p for p in _java_split(value) if p not in parts]
        else:
            parts = _java_split(old or "")
            for p in _java_split(value):     # Scala's List.diff: one occurrence per element
                if p in parts:
                    parts.remove(p)
        new[name] = ",".join(parts)
    return apply_incremental(current, ops, list_op, KafkaError)


def _preflight(resources) -> dict[int, tuple[int, str]]:
    """Resources named twice: index -> error (both copies fail, as Kafka's)."""
    seen: dict[tuple[int, str], list[int]] = {}
    for i, r in enumerate(resources):
        seen.setdefault((r.resource_type, r.resource_name), []).append(i)
    errors = {}
    for indexes in seen.values():
        if len(indexes) > 1:
            for i in indexes:
                errors[i] = (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
    return errors


def _alter(ctx, req, result_cls, alter_one):
    duplicates = _preflight(req.resources)
    results = []
    for i, r in enumerate(req.resources):
        out = result_cls(error_code=0, error_message=None, resource_type=r.resource_type,
                         resource_name=r.resource_name)
        results.append(out)
        if i in duplicates:
            out.error_code, out.error_message = duplicates[i]
            continue
        try:
            alter_one(ctx, r, bool(req.validate_only))
        except ConfigError as exc:
            out.error_code, out.error_message = exc.error_code, exc.message
        except KafkaError as exc:
            out.error_code, out.error_message = exc.code, exc.message
    return results


# -- IncrementalAlterConfigs -------------------------------------------------------------------

def _incremental_one(ctx, r, validate_only: bool) -> None:
    broker = ctx.broker
    _check_request(r.configs, lambda c: c.config_operation != OpType.DELETE and c.value is None)
    ops = [(c.name, c.config_operation, c.value) for c in r.configs]
    if r.resource_type == BROKER_RESOURCE:
        _alter_broker(ctx, r.resource_name, lambda stored: _incremental_broker_layer(stored, ops), validate_only)
    elif r.resource_type == TOPIC_RESOURCE:
        _check_topic_name(r.resource_name)
        t = broker.image.topics.get(r.resource_name)
        current = dict(t.configs) if t else {}
        new = incremental_alter_topic_configs(broker.config, current, ops)
        _apply_topic_overrides(broker, r.resource_name, current, new, validate_only)
    elif r.resource_type == CLIENT_METRICS_RESOURCE:
        _incremental_client_metrics(broker, r.resource_name, ops, validate_only)
    elif r.resource_type == group_configs.GROUP_RESOURCE:
        _incremental_group(broker, r.resource_name, ops, validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")


def _incremental_group(broker, name: str, ops, validate_only: bool) -> None:
    """A group's share.* configs (broker/share/group_configs.py), kept in the metadata log."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
    current = dict(broker.image.configs.get((group_configs.GROUP_RESOURCE, name), {}))
    new = group_configs.incremental(current, ops)
    group_configs.validate(new, lambda key, default: group_configs.broker_int(broker.config, key, default))
    changes: dict[str, str | None] = {k: None for k in current if k not in new}
    changes.update({k: v for k, v in new.items() if current.get(k) != v})
    if changes and not validate_only:
        broker.controller.set_configs(group_configs.GROUP_RESOURCE, name, changes)


def _incremental_client_metrics(broker, name: str, ops, validate_only: bool) -> None:
    """A client-metrics subscription (KIP-714), validated as Kafka's controller does."""
    from broker.metrics import client_metrics
    current = dict(broker.image.configs.get((CLIENT_METRICS_RESOURCE, name), {}))
    new = client_metrics.incremental(current, ops)
    client_metrics.validate(name, new)
    changes: dict[str, str | None] = {k: None for k in current if k not in new}
    changes.update({k: v for k, v in new.items() if current.get(k) != v})
    if changes and not validate_only:
        broker.controller.set_configs(CLIENT_METRICS_RESOURCE, name, changes)


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx, req):
    results = _alter(ctx, req, IncrementalResult, _incremental_one)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


# -- AlterConfigs (legacy: the given set replaces every dynamic value of the resource) ---------

def _legacy_one(ctx, r, validate_only: bool) -> None:
    broker = ctx.broker
    _check_request(r.configs, lambda c: c.value is None)
    pairs = [(c.name, c.value) for c in r.configs]
    if r.resource_type == BROKER_RESOURCE:
        _alter_broker(ctx, r.resource_name, lambda stored: dict(pairs), validate_only)
    elif r.resource_type == TOPIC_RESOURCE:
        _check_topic_name(r.resource_name)
        t = broker.image.topics.get(r.resource_name)
        current = dict(t.configs) if t else {}
        new = alter_topic_configs(broker.config, current, pairs)
        _apply_topic_overrides(broker, r.resource_name, current, new, validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx, req):
    results = _alter(ctx, req, LegacyResult, _legacy_one)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)


# -- before forwarding to the active controller ------------------------------------------------

def preforward(ctx, req, response_cls, result_cls, alter_one):
    """ConfigAdminManager.preprocess, on the broker that received the request when it forwards it
    to the active controller: resources named twice, and BROKER resources (the node id must be this
    broker's; the resulting config must be valid for this broker, which alone knows its static
    config), are answered here. Returns (the request with the other resources, or None when none
    is left; merge(controller's response or None) -> the whole response in request order)."""
    duplicates = _preflight(req.resources)
    errors: dict[int, tuple[int, str | None]] = {}
    for i, r in enumerate(req.resources):
        if i in duplicates:
            errors[i] = duplicates[i]
        elif r.resource_type == BROKER_RESOURCE:
            try:
                alter_one(ctx, r, True)
            except ConfigError as exc:
                errors[i] = (exc.error_code, exc.message)
            except KafkaError as exc:
                errors[i] = (exc.code, exc.message)
    rest = [r for i, r in enumerate(req.resources) if i not in errors]

    def merge(resp):
        forwarded = iter(resp.responses if resp is not None else [])
        results = []
        for i, r in enumerate(req.resources):
            if i in errors:
                code, message = errors[i]
                results.append(result_cls(error_code=code, error_message=message,
                                          resource_type=r.resource_type, resource_name=r.resource_name))
            else:
                results.append(next(forwarded))
        if resp is None:
            resp = response_cls(throttle_time_ms=0)
        resp.responses = results
        return resp

    if not errors:
        return req, None
    if not rest:
        return None, merge
    reduced = type(req)(**{f: getattr(req, f) for f in req._fields})
    reduced.resources = rest
    return reduced, merge


PREFORWARD = {
    ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda ctx, req: preforward(ctx, req, IncrementalAlterConfigsResponse,
                                                                  IncrementalResult, _incremental_one),
    ApiKey.ALTER_CONFIGS: lambda ctx, req: preforward(ctx, req, AlterConfigsResponse, LegacyResult, _legacy_one),
}


# ListConfigResources (KIP-1142; v0 was ListClientMetricsResources): the resources that have configs,
# by type. v0 knows client-metrics resources only; v1 any of these, all of them when none is named,
# and a type it does not list is UNSUPPORTED_VERSION (Kafka 4.3's KafkaApis.handleListConfigResources;
# DESCRIBE_CONFIGS on the cluster is checked by broker/security/authz.py)
_LISTED_TYPES = (group_configs.GROUP_RESOURCE, CLIENT_METRICS_RESOURCE, BROKER_LOGGER_RESOURCE, BROKER_RESOURCE,
                 TOPIC_RESOURCE)


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
async def list_config_resources(ctx, req):
    from kproto.messages.list_config_resources_response import ConfigResource, ListConfigResourcesResponse
    from broker.metrics import client_metrics
    supported = (CLIENT_METRICS_RESOURCE,) if ctx.api_version == 0 else _LISTED_TYPES
    wanted = list(req.resource_types or ()) if ctx.api_version >= 1 else []
    if any(t not in supported for t in wanted):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION,
                                           config_resources=[])
    wanted = set(wanted or supported)
    image = ctx.broker.image
    found = []
    if group_configs.GROUP_RESOURCE in wanted:
        found += [(n, group_configs.GROUP_RESOURCE) for (rtype, n), configs in sorted(image.configs.items())
                  if rtype == group_configs.GROUP_RESOURCE and configs]
    if CLIENT_METRICS_RESOURCE in wanted:
        found += [(n, CLIENT_METRICS_RESOURCE) for n in client_metrics.resource_names(image)]
    from broker.handlers.metadata import registered_brokers
    registered = registered_brokers(ctx.broker, ctx.conn.listener if ctx.conn else None)
    live = [str(ctx.broker.node_id)] if registered is None else [str(b[0]) for b in registered]
    if BROKER_LOGGER_RESOURCE in wanted:
        found += [(n, BROKER_LOGGER_RESOURCE) for n in live]
    if BROKER_RESOURCE in wanted:
        found += [(n, BROKER_RESOURCE) for n in live]
    if TOPIC_RESOURCE in wanted:
        found += [(n, TOPIC_RESOURCE) for n in sorted(image.topics)]
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=[
        ConfigResource(resource_name=n, resource_type=t) for n, t in found])
