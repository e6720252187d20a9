"""ACLs and the authorizer, with Kafka's StandardAuthorizer semantics.

ACLs are AccessControlEntryRecord / RemoveAccessControlEntryRecord in the
metadata log (so they survive restarts); the image keeps them by id. A
request is allowed when the principal is a super user, or some ALLOW ACL
matches and no DENY ACL does (deny wins); ACLs match by resource (LITERAL
name, the LITERAL wildcard `*`, PREFIXED), principal (or `User:*`), host
(or `*`) and operation (ALL, or the operation, or for ALLOW one implying it:
READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS). With no ACL at all on the resource the answer is
allow.everyone.if.no.acl.found."""
from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

log = logging.getLogger("kproto.authorizer")

# org.apache.kafka.common.resource.ResourceType
UNKNOWN, ANY = 0, 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
RESOURCE_TYPES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER", TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
                  DELEGATION_TOKEN: "DELEGATION_TOKEN", USER: "USER"}
# PatternType
MATCH, LITERAL, PREFIXED = 2, 3, 4
# AclOperation
OPS = {"ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
       "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12,
       "CREATE_TOKENS": 13, "DESCRIBE_TOKENS": 14}
ALL = OPS["ALL"]
OP_NAMES = {v: k for k, v in OPS.items()}
# AclPermissionType
DENY, ALLOW = 2, 3

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
_IMPLIES_DESCRIBE = {OPS["DESCRIBE"], OPS["READ"], OPS["WRITE"], OPS["DELETE"], OPS["ALTER"]}
_IMPLIES_DESCRIBE_CONFIGS = {OPS["DESCRIBE_CONFIGS"], OPS["ALTER_CONFIGS"]}

# AclEntry.supportedOperations: what *_authorized_operations can report
SUPPORTED_OPERATIONS = {
    TOPIC: ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"),
    GROUP: ("READ", "DESCRIBE", "DELETE"),
    CLUSTER: ("CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
              "DESCRIBE"),
    TRANSACTIONAL_ID: ("DESCRIBE", "WRITE"),
    DELEGATION_TOKEN: ("DESCRIBE",),
    USER: ("CREATE_TOKENS", "DESCRIBE_TOKENS"),
}
STANDARD_AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "kafka.security.authorizer.AclAuthorizer")


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding: resource pattern, principal, host, operation, permission."""
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @classmethod
    def from_record(cls, r) -> "Acl":
        return cls(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host, r.operation,
                   r.permission_type)

    def record(self, acl_id: uuid.UUID):
        from kproto.metadata.access_control_entry_record import AccessControlEntryRecord
        return AccessControlEntryRecord(id=acl_id, resource_type=self.resource_type,
                                        resource_name=self.resource_name, pattern_type=self.pattern_type,
                                        principal=self.principal, host=self.host, operation=self.operation,
                                        permission_type=self.permission_type)


def filter_matches(acl: Acl, f) -> bool:
    """AclBindingFilter.matches: f has resource_type_filter, resource_name_filter,
    pattern_type_filter, principal_filter, host_filter, operation, permission_type."""
    if f.resource_type_filter != ANY and f.resource_type_filter != acl.resource_type:
        return False
    name, pattern = f.resource_name_filter, f.pattern_type_filter
    if pattern == MATCH:
        if name is not None:
            ok = ((acl.pattern_type == LITERAL and acl.resource_name in (name, WILDCARD))
                  or (acl.pattern_type == PREFIXED and name.startswith(acl.resource_name)))
            if not ok:
                return False
    else:
        if pattern != ANY and pattern != acl.pattern_type:
            return False
        if name is not None and name != acl.resource_name:
            return False
    if f.principal_filter is not None and f.principal_filter != acl.principal:
        return False
    if f.host_filter is not None and f.host_filter != acl.host:
        return False
    if f.operation != ANY and f.operation != acl.operation:
        return False
    if f.permission_type != ANY and f.permission_type != acl.permission_type:
        return False
    return True


def validate_filter(f) -> str | None:
    for value, what in ((f.resource_type_filter, "resourceType"), (f.pattern_type_filter, "patternType"),
                        (f.operation, "operation"), (f.permission_type, "permissionType")):
        if value == UNKNOWN:
            return "Filter contains UNKNOWN elements"
    return None


def validate_new(acl: Acl) -> str | None:
    """Why Kafka refuses to create this ACL (INVALID_REQUEST), or None."""
    if acl.resource_type not in RESOURCE_TYPES:
        return f"Invalid resourceType {acl.resource_type}"
    if acl.pattern_type not in (LITERAL, PREFIXED):
        return f"Invalid patternType {acl.pattern_type}"
    if acl.operation not in OP_NAMES:
        return f"Invalid operation {acl.operation}"
    if acl.permission_type not in (DENY, ALLOW):
        return f"Invalid permissionType {acl.permission_type}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == CLUSTER and acl.resource_name != CLUSTER_NAME:
        return "The only valid name for the CLUSTER resource is kafka-cluster"
    if acl.principal is None or ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                "principal type from the principal name)")
    if acl.host is None:
        return "Invalid null host"
    return None


class Authorizer:
    def __init__(self, config, image):
        self.image = image
        # authorizer settings are not KafkaConfig keys: Kafka hands them to the authorizer as given
        raw = config.static_configs.get("super.users", "")
        self.super_users = {u.strip() for u in raw.split(";") if u.strip()}
        self.allow_if_no_acl = str(config.static_configs.get("allow.everyone.if.no.acl.found",
                                                             "false")).strip().lower() == "true"

    def _acls(self):
        return self.image.acls.values()

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        found_resource_acl = False
        allowed = False
        for acl in self._acls():
            if acl.resource_type != resource_type:
                continue
            if acl.pattern_type == LITERAL:
                if acl.resource_name != name and acl.resource_name != WILDCARD:
                    continue
            elif acl.pattern_type == PREFIXED:
                if not name.startswith(acl.resource_name):
                    continue
            else:
                continue
            found_resource_acl = True
            if acl.principal != principal and acl.principal != "User:*":
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.permission_type == DENY:
                if acl.operation in (ALL, operation):
                    return False
                continue
            if acl.operation in (ALL, operation):
                allowed = True
            elif operation == OPS["DESCRIBE"] and acl.operation in _IMPLIES_DESCRIBE:
                allowed = True
            elif operation == OPS["DESCRIBE_CONFIGS"] and acl.operation in _IMPLIES_DESCRIBE_CONFIGS:
                allowed = True
        if allowed:
            return True
        return not found_resource_acl and self.allow_if_no_acl

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """authorizeByResourceType: some resource of the type is allowed (used for idempotent
        producers without IDEMPOTENT_WRITE: WRITE on any topic)."""
        if principal in self.super_users:
            return True
        denied_all = any(a.resource_type == resource_type and a.pattern_type == LITERAL
                         and a.resource_name == WILDCARD and a.permission_type == DENY
                         and a.operation in (ALL, operation) and a.principal in (principal, "User:*")
                         and a.host in (host, WILDCARD) for a in self._acls())
        if denied_all:
            return False
        for acl in self._acls():
            if (acl.resource_type == resource_type and acl.permission_type == ALLOW
                    and acl.operation in (ALL, operation) and acl.principal in (principal, "User:*")
                    and acl.host in (host, WILDCARD)
                    and not self._denied_pattern(acl, principal, host, operation)):
                return True
        return self.allow_if_no_acl and not any(a.resource_type == resource_type for a in self._acls())

    def _denied_pattern(self, allow: Acl, principal, host, operation) -> bool:
        for a in self._acls():
            if (a.permission_type == DENY and a.resource_type == allow.resource_type
                    and a.operation in (ALL, operation) and a.principal in (principal, "User:*")
                    and a.host in (host, WILDCARD)):
                if a.pattern_type == LITERAL and a.resource_name == allow.resource_name \
                        and allow.pattern_type == LITERAL:
                    return True
                if a.pattern_type == PREFIXED and allow.resource_name.startswith(a.resource_name):
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, resource_type: int, name: str) -> int:
        bits = 0
        for op in SUPPORTED_OPERATIONS[resource_type]:
            code = OPS[op]
            if self.authorize(principal, host, code, resource_type, name):
                bits |= 1 << code
        return bits


def authorizer_for(config, image):
    name = (config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in STANDARD_AUTHORIZERS:
        from broker.config.types import ConfigError
        raise ConfigError(f"authorizer.class.name {name} is not supported: kproto implements "
                          f"{STANDARD_AUTHORIZERS[0]}")
    return Authorizer(config, image)
