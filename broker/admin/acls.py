"""`kproto acl list|create|delete`: ACL bindings as kafka-acls.sh handles them (DescribeAcls,
CreateAcls, DeleteAcls), with Kafka's names for resource types, pattern types, operations and
permissions."""
from __future__ import annotations

from kproto.messages.create_acls_request import CreateAclsRequest
from kproto.messages.delete_acls_request import DeleteAclsRequest
from kproto.messages.describe_acls_request import DescribeAclsRequest

from broker.admin import output
from broker.admin.errors import USAGE, AdminError, KafkaError, check

# Kafka's org.apache.kafka.common.resource / acl enums (codes on the wire)
RESOURCE_TYPES = {"any": 1, "topic": 2, "group": 3, "cluster": 4, "transactional_id": 5,
                  "delegation_token": 6, "user": 7}
PATTERN_TYPES = {"any": 1, "match": 2, "literal": 3, "prefixed": 4}
OPERATIONS = {"any": 1, "all": 2, "read": 3, "write": 4, "create": 5, "delete": 6, "alter": 7, "describe": 8,
              "cluster_action": 9, "describe_configs": 10, "alter_configs": 11, "idempotent_write": 12,
              "create_tokens": 13, "describe_tokens": 14}
PERMISSIONS = {"any": 1, "deny": 2, "allow": 3}
COLUMNS = [("principal", "PRINCIPAL"), ("host", "HOST"), ("operation", "OPERATION"),
           ("permission", "PERMISSION"), ("resource_type", "RESOURCE-TYPE"), ("resource_name", "RESOURCE"),
           ("pattern_type", "PATTERN")]


def _name(table: dict, code: int) -> str:
    for k, v in table.items():
        if v == code:
            return k.upper()
    return str(code)


def _code(table: dict, value: str, flag: str, exclude=()) -> int:
    key = value.lower().replace("-", "_")
    if key not in table or key in exclude:
        choices = ", ".join(k for k in table if k not in exclude)
        raise AdminError(f"{flag} {value!r}: one of {choices}", USAGE)
    return table[key]


def add_parser(sub, leaf) -> None:
    p = sub.add_parser("acl", help="list, create and delete ACLs")
    s = p.add_subparsers(dest="action", required=True)
    for name, help_text, concrete in (("list", "ACLs matching a filter", False),
                                      ("create", "add an ACL", True),
                                      ("delete", "delete the ACLs matching a filter", False)):
        a = leaf(s, name, help_text)
        any_ = None if concrete else "any"
        a.add_argument("--resource-type", required=concrete, default=any_,
                       help=f"{'|'.join(k for k in RESOURCE_TYPES if concrete is False or k != 'any')}")
        a.add_argument("--resource-name", default=None, help="topic or group name, kafka-cluster for the cluster")
        a.add_argument("--pattern-type", default="literal" if concrete else "any",
                       help="literal|prefixed" + ("" if concrete else "|match|any"))
        a.add_argument("--principal", required=concrete, default=None, help="User:NAME")
        a.add_argument("--host", default="*" if concrete else None)
        a.add_argument("--operation", required=concrete, default=any_, help="|".join(OPERATIONS))
        a.add_argument("--permission", default="allow" if concrete else "any", help="allow|deny")


def run(args, admin) -> int:
    return {"list": list_acls, "create": create, "delete": delete}[args.action](args, admin)


def _filter(args) -> dict:
    return {"resource_type_filter": _code(RESOURCE_TYPES, args.resource_type, "--resource-type"),
            "resource_name_filter": args.resource_name,
            "pattern_type_filter": _code(PATTERN_TYPES, args.pattern_type, "--pattern-type"),
            "principal_filter": args.principal, "host_filter": args.host,
            "operation": _code(OPERATIONS, args.operation, "--operation"),
            "permission_type": _code(PERMISSIONS, args.permission, "--permission")}


def _row(resource_type, resource_name, pattern_type, principal, host, operation, permission) -> dict:
    return {"principal": principal, "host": host, "operation": _name(OPERATIONS, operation),
            "permission": _name(PERMISSIONS, permission), "resource_type": _name(RESOURCE_TYPES, resource_type),
            "resource_name": resource_name, "pattern_type": _name(PATTERN_TYPES, pattern_type)}


def list_acls(args, admin) -> int:
    resp = admin.call(DescribeAclsRequest(**_filter(args)), 3)
    check(resp.error_code, "DescribeAcls", resp.error_message)
    rows = [_row(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                 a.permission_type) for r in resp.resources for a in r.acls]
    rows.sort(key=lambda r: (r["resource_type"], r["resource_name"], r["principal"], r["operation"]))
    output.emit(args, rows, lambda rows: output.table(rows, COLUMNS))
    return 0


def create(args, admin) -> int:
    rtype = _code(RESOURCE_TYPES, args.resource_type, "--resource-type", exclude=("any",))
    name = args.resource_name or ("kafka-cluster" if rtype == RESOURCE_TYPES["cluster"] else None)
    if name is None:
        raise AdminError("create needs --resource-name", USAGE)
    creation = CreateAclsRequest.AclCreation(
        resource_type=rtype, resource_name=name,
        resource_pattern_type=_code(PATTERN_TYPES, args.pattern_type, "--pattern-type", exclude=("any", "match")),
        principal=args.principal, host=args.host,
        operation=_code(OPERATIONS, args.operation, "--operation", exclude=("any",)),
        permission_type=_code(PERMISSIONS, args.permission, "--permission", exclude=("any",)))
    r = admin.call(CreateAclsRequest(creations=[creation]), 3).results[0]
    check(r.error_code, "CreateAcls", r.error_message)
    row = _row(creation.resource_type, name, creation.resource_pattern_type, creation.principal, creation.host,
               creation.operation, creation.permission_type)
    output.emit(args, row, lambda r: print(
        f"Added ACL: {r['permission']} {r['principal']} from {r['host']} {r['operation']} on "
        f"{r['resource_type']}:{r['resource_name']} ({r['pattern_type']})"))
    return 0


def delete(args, admin) -> int:
    resp = admin.call(DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(**_filter(args))]), 3)
    fr = resp.filter_results[0]
    check(fr.error_code, "DeleteAcls", fr.error_message)
    rows = []
    for m in fr.matching_acls:
        if m.error_code:
            raise KafkaError(m.error_code, "DeleteAcls", m.error_message)
        rows.append(_row(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                         m.permission_type))
    output.emit(args, rows, lambda rows: (print(f"Deleted {len(rows)} ACLs"), rows and output.table(rows, COLUMNS)))
    return 0
