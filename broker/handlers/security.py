"""SASL and ACL requests on a broker with PLAINTEXT listeners and no
authorizer: answered the way Kafka answers them in that setup, so tools such
as kafka-acls.sh report "security disabled" instead of failing to connect."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.create_acls_response import CreateAclsResponse
from kproto.messages.delete_acls_response import DeleteAclsResponse
from kproto.messages.describe_acls_response import DescribeAclsResponse
from kproto.messages.sasl_authenticate_response import SaslAuthenticateResponse
from kproto.messages.sasl_handshake_response import SaslHandshakeResponse

from broker.handlers import handles
from broker.security import acl_admin, authenticate

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _sasl_session(ctx):
    session = getattr(ctx.conn, "session", None)
    return session if session is not None and session.sasl else None


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx, req):
    session = _sasl_session(ctx)
    if session is not None:
        return authenticate.handshake(ctx, req, session)
    # the listener is PLAINTEXT: there is no SASL exchange to start
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx, req):
    session = _sasl_session(ctx)
    if session is not None:
        return authenticate.authenticate(ctx, req, session)
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"")


@handles(ApiKey.DESCRIBE_ACLS, 0, 3)
async def describe_acls(ctx, req):
    if getattr(ctx.broker, "authorizer", None) is not None:
        return acl_admin.describe_acls(ctx.broker, req, ctx.api_version)
    return DescribeAclsResponse(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                                error_message=NO_AUTHORIZER, resources=[])


@handles(ApiKey.CREATE_ACLS, 0, 3)
async def create_acls(ctx, req):
    if getattr(ctx.broker, "authorizer", None) is not None:
        return acl_admin.create_acls(ctx.broker, req, ctx.api_version)
    result = CreateAclsResponse.AclCreationResult
    return CreateAclsResponse(throttle_time_ms=0, results=[
        result(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER) for _ in req.creations])


@handles(ApiKey.DELETE_ACLS, 0, 3)
async def delete_acls(ctx, req):
    if getattr(ctx.broker, "authorizer", None) is not None:
        return acl_admin.delete_acls(ctx.broker, req, ctx.api_version)
    result = DeleteAclsResponse.DeleteAclsFilterResult
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        result(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER, matching_acls=[])
        for _ in req.filters])
