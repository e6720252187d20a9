"""Request handlers, one module per API family.

A handler is `async def handler(ctx, request) -> response | None`, registered
with the version range it supports end to end. ApiVersions advertises exactly
this registry, so nothing is advertised that does not work.
"""
from __future__ import annotations

import importlib

from kproto.api import ApiKey

HANDLERS: dict[int, tuple[int, int, object]] = {}

# Modules that register handlers when imported.
MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "offsets",
    "topics",
    "configs",
    "cluster",
    "groups",
    "consumer_groups",
    "share_groups",
    "share_group_offsets",
    "share_state",
    "transactions",
    "security",
    "quorum",
    "describe_topic_partitions",
    "features",
    "registration",
    "telemetry",
    "log_dirs",
    "leader_election",
    "scram",
    "quotas",
    "delegation_tokens",
    "replication",
    "reassignments",
    "raft_voters",
)


def handles(api_key: int, min_version: int, max_version: int):
    def register(fn):
        HANDLERS[int(api_key)] = (min_version, max_version, fn)
        return fn
    return register


# APIs served always but advertised in ApiVersions only while predicate(broker)
# holds (client telemetry: Kafka advertises it only with a telemetry receiver)
ADVERTISED_WHEN: dict[int, object] = {}


def advertised_when(api_key: int, predicate) -> None:
    ADVERTISED_WHEN[int(api_key)] = predicate


def load_all() -> dict:
    for name in MODULES:
        try:
            importlib.import_module(f"broker.handlers.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"broker.handlers.{name}":
                raise
    return HANDLERS


# the requests that change cluster metadata: a node that is not the active controller forwards them
# there (broker/quorum/replicated.py); a handler module adds its own APIs when it is loaded
FORWARDED = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
             ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS,
             ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
             ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
             ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.UPDATE_FEATURES, ApiKey.DESCRIBE_QUORUM,
             ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER}
