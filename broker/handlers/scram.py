"""AlterUserScramCredentials / DescribeUserScramCredentials: SCRAM
credentials as UserScramCredentialRecord in the metadata log (Kafka's
ScramControlManager checks and messages). The client sends the salted
password; the broker keeps only the stored and server keys."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.alter_user_scram_credentials_response import AlterUserScramCredentialsResponse
from kproto.messages.describe_user_scram_credentials_response import DescribeUserScramCredentialsResponse
from kproto.metadata.remove_user_scram_credential_record import RemoveUserScramCredentialRecord
from kproto.metadata.user_scram_credential_record import UserScramCredentialRecord

from broker.handlers import handles
from broker.security.acls import OPS
from broker.security.authz import Check
from broker.security.sasl import SCRAM_MECHANISM_NAMES, SCRAM_MECHANISMS, scram_keys

MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
_HASHES = {v[0]: v[1] for v in SCRAM_MECHANISMS.values()}


def _authorized(ctx, operation: str) -> bool:
    authz = getattr(ctx.broker, "authorizer", None)
    return authz is None or Check(authz, ctx).cluster(OPS[operation])


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx, req):
    Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    errors: dict[str, tuple[int, str]] = {}
    if not _authorized(ctx, "ALTER"):
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None)
            for u in users])
    image = ctx.broker.image
    seen = set()
    records = {}

    def fail(user, code, message):
        errors.setdefault(user, (code, message))

    for d in req.deletions:
        key = (d.name, d.mechanism)
        if key in seen:
            fail(d.name, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
        seen.add(key)
        if not d.name:
            fail(d.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif d.mechanism not in SCRAM_MECHANISM_NAMES:
            fail(d.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif key not in image.scram:
            fail(d.name, ErrorCode.RESOURCE_NOT_FOUND,
                 "Attempt to delete a user credential that does not exist")
        else:
            records.setdefault(d.name, []).append(RemoveUserScramCredentialRecord(name=d.name,
                                                                                  mechanism=d.mechanism))
    for u in req.upsertions:
        key = (u.name, u.mechanism)
        if key in seen:
            fail(u.name, ErrorCode.DUPLICATE_RESOURCE,
                 "A user credential cannot be altered twice in the same request")
        seen.add(key)
        if not u.name:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif u.mechanism not in SCRAM_MECHANISM_NAMES:
            fail(u.name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif u.iterations < MIN_ITERATIONS:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif u.iterations > MAX_ITERATIONS:
            fail(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        else:
            stored, server = scram_keys(bytes(u.salted_password), _HASHES[u.mechanism])
            records.setdefault(u.name, []).append(UserScramCredentialRecord(
                name=u.name, mechanism=u.mechanism, salt=bytes(u.salt), stored_key=stored,
                server_key=server, iterations=u.iterations))
    to_write = [r for user, rs in records.items() if user not in errors for r in rs]
    if to_write:
        ctx.broker.metadata.append(to_write)
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        Result(user=u, error_code=errors.get(u, (0, None))[0], error_message=errors.get(u, (0, None))[1])
        for u in users])


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx, req):
    R = DescribeUserScramCredentialsResponse
    if not _authorized(ctx, "DESCRIBE"):
        return R(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                 error_message=None, results=[])
    by_user: dict[str, list] = {}
    for (user, mech), (_salt, _st, _sv, iterations) in sorted(ctx.broker.image.scram.items()):
        by_user.setdefault(user, []).append(R.CredentialInfo(mechanism=mech, iterations=iterations))
    results = []
    if not req.users:
        for user, infos in by_user.items():
            results.append(R.DescribeUserScramCredentialsResult(user=user, error_code=0, error_message=None,
                                                                credential_infos=infos))
    else:
        names = [u.name for u in req.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message="Cannot describe SCRAM credentials for the same user twice in a single request",
                    credential_infos=[]))
            elif name not in by_user:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message="Attempt to describe a user credential that does not exist",
                    credential_infos=[]))
            else:
                results.append(R.DescribeUserScramCredentialsResult(
                    user=name, error_code=0, error_message=None, credential_infos=by_user[name]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
