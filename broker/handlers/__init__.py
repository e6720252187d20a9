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


# Modules imported at their APIs' first request, not at start-up: ApiVersions needs only the
# version ranges, which are written here (tests/test_handlers_deferred.py checks them against each
# module's own @handles). Their message classes and the services behind them (share groups,
# transactions, ACLs, SCRAM, delegation tokens, quotas, ...) are most of the handlers' imports and
# many brokers never serve them (start-up CPU, issue #26). A deferred module registers nothing
# but handlers when imported (no FORWARDED, advertised_when or authz wrapper of its own).
DEFERRED: dict[str, dict[int, tuple[int, int]]] = {
    "configs": {ApiKey.DESCRIBE_CONFIGS: (0, 4), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
                ApiKey.ALTER_CONFIGS: (0, 2), ApiKey.LIST_CONFIG_RESOURCES: (0, 1)},
    "cluster": {ApiKey.DESCRIBE_CLUSTER: (0, 2), ApiKey.DESCRIBE_LOG_DIRS: (0, 5)},
    "consumer_groups": {ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1)},
    "share_groups": {ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1), ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
                     ApiKey.SHARE_FETCH: (1, 2), ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
                     ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1)},
    "share_group_offsets": {ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0), ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0)},
    "share_state": {ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0), ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
                    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1), ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
                    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1)},
    "transactions": {ApiKey.INIT_PRODUCER_ID: (0, 5), ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
                     ApiKey.ADD_OFFSETS_TO_TXN: (0, 4), ApiKey.END_TXN: (0, 5), ApiKey.WRITE_TXN_MARKERS: (0, 2),
                     ApiKey.TXN_OFFSET_COMMIT: (0, 5), ApiKey.DESCRIBE_PRODUCERS: (0, 0),
                     ApiKey.DESCRIBE_TRANSACTIONS: (0, 0), ApiKey.LIST_TRANSACTIONS: (0, 2)},
    "security": {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2), ApiKey.DESCRIBE_ACLS: (0, 3),
                 ApiKey.CREATE_ACLS: (0, 3), ApiKey.DELETE_ACLS: (0, 3)},
    "quorum": {ApiKey.DESCRIBE_QUORUM: (0, 2)},
    "describe_topic_partitions": {ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0)},
    "features": {ApiKey.UPDATE_FEATURES: (0, 2)},
    "registration": {ApiKey.UNREGISTER_BROKER: (0, 0)},
    "log_dirs": {ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2)},
    "scram": {ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0)},
    "quotas": {ApiKey.ALTER_CLIENT_QUOTAS: (0, 1), ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1)},
    "delegation_tokens": {ApiKey.CREATE_DELEGATION_TOKEN: (0, 3), ApiKey.RENEW_DELEGATION_TOKEN: (0, 2),
                          ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2), ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3)},
    "reassignments": {ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1), ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0)},
    "raft_voters": {ApiKey.ADD_RAFT_VOTER: (0, 1), ApiKey.REMOVE_RAFT_VOTER: (0, 0)},
}


def _first_request(module: str, api_key: int):
    """The entry of a deferred module's API until the module is imported: the import's @handles
    puts the real handler in HANDLERS (tables copied from HANDLERS before that, such as a
    controller listener's, keep calling through this one)."""
    async def handler(ctx, request):
        importlib.import_module(f"broker.handlers.{module}")
        return await HANDLERS[api_key][2](ctx, request)
    return handler


def load_served() -> dict:
    """What a broker serves: the modules not deferred imported, the deferred ones' APIs
    registered with their version ranges, imported at the first request."""
    for name in MODULES:
        if name not in DEFERRED:
            importlib.import_module(f"broker.handlers.{name}")
    for name, keys in DEFERRED.items():
        for key, (lo, hi) in keys.items():
            if int(key) not in HANDLERS:   # (already imported: its own entry stays)
                HANDLERS[int(key)] = (lo, hi, _first_request(name, int(key)))
    return HANDLERS


# the requests that change cluster metadata: a node that is not the active controller forwards them
# there (broker/quorum/replicated.py); a handler module adds its own APIs when it is loaded
FORWARDED = {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
             ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS,
             ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
             ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
             ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.UPDATE_FEATURES, ApiKey.DESCRIBE_QUORUM,
             ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER,
             # (reassignments is a deferred module: its APIs are here before it is imported)
             ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS}
