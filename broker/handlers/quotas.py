"""DescribeClientQuotas / AlterClientQuotas: client quotas as
ClientQuotaRecord in the metadata log, checked as Kafka's
ClientQuotaControlManager checks them (kafka-configs.sh --entity-type
users/clients/ips)."""
from __future__ import annotations

import ipaddress

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.alter_client_quotas_response import AlterClientQuotasResponse
from kproto.messages.describe_client_quotas_response import DescribeClientQuotasResponse
from kproto.metadata.client_quota_record import ClientQuotaRecord

from broker.handlers import handles
from broker.security.quotas import CLIENT_KEYS, IP_KEYS

ENTITY_TYPES = ("user", "client-id", "ip")
_LONG_KEYS = ("producer_byte_rate", "consumer_byte_rate")
_INT_KEYS = ("connection_creation_rate",)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _entity_error(entity) -> str | None:
    if not entity:
        return "Invalid empty client quota entity"
    seen = set()
    for e in entity:
        if e.entity_type not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {e.entity_type}"
        if e.entity_type in seen:
            return f"Duplicate entity type {e.entity_type}"
        seen.add(e.entity_type)
        if e.entity_type == "ip" and e.entity_name is not None:
            try:
                ipaddress.ip_address(e.entity_name)
            except ValueError:
                return f"{e.entity_name} is not a valid IP or resolvable host."
    if "ip" in seen and len(seen) > 1:
        return "Invalid quota entity combination, IP entity should not be combined with User or ClientId entities."
    return None


def _op_error(types: set, op) -> str | None:
    allowed = IP_KEYS if "ip" in types else CLIENT_KEYS
    if op.key not in allowed:
        return f"Invalid configuration key {op.key}"
    if op.remove:
        return None
    if not op.value > 0:
        # Kafka 3.9 refuses a quota that could not limit anything (NaN included)
        return f"Quota {op.key} must be greater than 0"
    if op.key in _LONG_KEYS and op.value != int(op.value):
        return f"Configuration {op.key} must be a Long value"
    if op.key in _INT_KEYS and op.value != int(op.value):
        return f"Configuration {op.key} must be an Integer value"
    return None


@handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter_client_quotas(ctx, req):
    R = AlterClientQuotasResponse
    results, records = [], []
    for entry in req.entries:
        error = _entity_error(entry.entity)
        if error is None:
            types = {e.entity_type for e in entry.entity}
            error = next((m for m in (_op_error(types, op) for op in entry.ops) if m), None)
        if error is None and len({op.key for op in entry.ops}) != len(entry.ops):
            error = "Duplicate configuration keys"
        if error is None:
            for op in entry.ops:
                records.append(ClientQuotaRecord(
                    entity=[ClientQuotaRecord.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                            for e in entry.entity],
                    key=op.key, value=0.0 if op.remove else float(op.value), remove=bool(op.remove)))
        results.append(R.EntryData(
            error_code=ErrorCode.INVALID_REQUEST if error else 0, error_message=error,
            entity=[R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]))
    if records and not req.validate_only:
        ctx.broker.metadata.append(records)
    return R(throttle_time_ms=0, entries=results)


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def describe_client_quotas(ctx, req):
    R = DescribeClientQuotasResponse
    types = [c.entity_type for c in req.components]
    if len(set(types)) != len(types):
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                 error_message="Duplicate entity type in filter component", entries=None)
    for c in req.components:
        if c.match_type == MATCH_EXACT and c.match is None:
            return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                     error_message="Request specified MATCH_TYPE_EXACT, but set match string to None",
                     entries=None)
    entries = []
    for entity, values in sorted(ctx.broker.image.client_quotas.items(),
                                 key=lambda kv: sorted((t, n or "") for t, n in kv[0])):
        names = dict(entity)
        if req.strict and set(names) != set(types):
            continue
        ok = True
        for c in req.components:
            if c.entity_type not in names:
                ok = False
            elif c.match_type == MATCH_EXACT:
                ok = names[c.entity_type] == c.match
            elif c.match_type == MATCH_DEFAULT:
                ok = names[c.entity_type] is None
            else:
                ok = names[c.entity_type] is not None
            if not ok:
                break
        if ok and values:
            entries.append(R.EntryData(
                entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in sorted(entity, key=lambda e: e[0])],
                values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
