"""CreateAcls / DescribeAcls / DeleteAcls against the metadata log, as
Kafka's AclControlManager answers them."""
from __future__ import annotations

import uuid

from kproto.errors import ErrorCode
from kproto.messages.create_acls_response import CreateAclsResponse
from kproto.messages.delete_acls_response import DeleteAclsResponse
from kproto.messages.describe_acls_response import DescribeAclsResponse
from kproto.metadata.remove_access_control_entry_record import RemoveAccessControlEntryRecord

from broker.security.acls import LITERAL, Acl, filter_matches, validate_filter, validate_new


def create_acls(broker, req, version: int):
    results, records = [], []
    existing = set(broker.image.acls.values())
    for c in req.creations:
        acl = Acl(c.resource_type, c.resource_name,
                  c.resource_pattern_type if version >= 1 else LITERAL,
                  c.principal, c.host, c.operation, c.permission_type)
        problem = validate_new(acl)
        if problem:
            results.append(CreateAclsResponse.AclCreationResult(error_code=ErrorCode.INVALID_REQUEST,
                                                               error_message=problem))
            continue
        if acl not in existing:
            existing.add(acl)
            records.append(acl.record(uuid.uuid4()))
        results.append(CreateAclsResponse.AclCreationResult(error_code=0, error_message=None))
    if records:
        broker.metadata.append(records)
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def _sorted(acls):
    return sorted(acls, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type, a.principal,
                                       a.host, a.operation, a.permission_type))


def describe_acls(broker, req, version: int):
    R = DescribeAclsResponse
    if version == 0:
        req.pattern_type_filter = LITERAL
    problem = validate_filter(req)
    if problem:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[])
    groups: dict[tuple, list] = {}
    for acl in _sorted(a for a in broker.image.acls.values() if filter_matches(a, req)):
        groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
            R.AclDescription(principal=acl.principal, host=acl.host, operation=acl.operation,
                             permission_type=acl.permission_type))
    return R(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        R.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p, acls=acls)
        for (t, n, p), acls in groups.items()])


def delete_acls(broker, req, version: int):
    R = DeleteAclsResponse
    results, records, removed = [], [], set()
    for f in req.filters:
        if version == 0:
            f.pattern_type_filter = LITERAL
        problem = validate_filter(f)
        if problem:
            results.append(R.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem,
                                                    matching_acls=[]))
            continue
        matching = []
        for acl_id, acl in broker.image.acls.items():
            if filter_matches(acl, f):
                matching.append(R.DeleteAclsMatchingAcl(
                    error_code=0, error_message=None, resource_type=acl.resource_type,
                    resource_name=acl.resource_name, pattern_type=acl.pattern_type, principal=acl.principal,
                    host=acl.host, operation=acl.operation, permission_type=acl.permission_type))
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntryRecord(id=acl_id))
        results.append(R.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=matching))
    if records:
        broker.metadata.append(records)
    return R(throttle_time_ms=0, filter_results=results)
