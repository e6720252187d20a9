"""CreateDelegationToken / RenewDelegationToken / ExpireDelegationToken /
DescribeDelegationToken with Kafka's checks and errors: tokens need
delegation.token.secret.key (else DELEGATION_TOKEN_AUTH_DISABLED) and a
connection authenticated by SASL or a client certificate, not by a token
(else DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)."""
from __future__ import annotations

import hmac as _hmac
import time

from kproto.api import ApiKey
from kproto.errors import ErrorCode as E
from kproto.messages.create_delegation_token_response import CreateDelegationTokenResponse
from kproto.messages.describe_delegation_token_response import DescribeDelegationTokenResponse
from kproto.messages.expire_delegation_token_response import ExpireDelegationTokenResponse
from kproto.messages.renew_delegation_token_response import RenewDelegationTokenResponse
from kproto.metadata.delegation_token_record import DelegationTokenRecord
from kproto.metadata.remove_delegation_token_record import RemoveDelegationTokenRecord

from broker.handlers import handles
from broker.security import tokens
from broker.security.principal import ANONYMOUS


def _principal(ctx) -> str:
    session = getattr(ctx.conn, "session", None)
    return session.principal if session is not None else ANONYMOUS


def _refused(ctx) -> int | None:
    if tokens.secret(ctx.broker.config) is None:
        return E.DELEGATION_TOKEN_AUTH_DISABLED
    session = getattr(ctx.conn, "session", None)
    if session is None or session.protocol == "PLAINTEXT" or getattr(session, "token_authenticated", False) \
            or (session.protocol == "SSL" and session.principal == ANONYMOUS):
        return E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    return None


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


def _find(ctx, mac: bytes):
    for token in ctx.broker.image.delegation_tokens.values():
        if _hmac.compare_digest(tokens.token_hmac(ctx.broker.config, token.token_id), bytes(mac)):
            return token
    return None


def _may_act(principal: str, token) -> bool:
    return principal in (token.owner, token.requester) or principal in token.renewers


@handles(ApiKey.CREATE_DELEGATION_TOKEN, 0, 3)
async def create_delegation_token(ctx, req):
    R = CreateDelegationTokenResponse
    requester = _principal(ctx)
    code = _refused(ctx)
    owner = requester
    if ctx.api_version >= 3 and req.owner_principal_name:
        owner = f"{req.owner_principal_type}:{req.owner_principal_name}"
    if code is None and owner != requester:
        authz = getattr(ctx.broker, "authorizer", None)
        if authz is not None:
            from broker.security.acls import OPS, USER
            from broker.security.authz import Check
            if not Check(authz, ctx).allowed(OPS["CREATE_TOKENS"], USER, owner):
                code = E.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    o_type, o_name = _split(owner)
    r_type, r_name = _split(requester)
    if code is not None:
        return R(error_code=code, principal_type=o_type, principal_name=o_name,
                 token_requester_principal_type=r_type, token_requester_principal_name=r_name,
                 issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1, token_id="", hmac=b"",
                 throttle_time_ms=0)
    config = ctx.broker.config
    now = int(time.time() * 1000)
    max_life = config.get_int("delegation.token.max.lifetime.ms")
    if req.max_lifetime_ms > 0:
        max_life = min(max_life, req.max_lifetime_ms)
    max_ts = now + max_life
    expiry = min(now + config.get_int("delegation.token.expiry.time.ms"), max_ts)
    token_id = tokens.new_token_id()
    record = DelegationTokenRecord(owner=owner, requester=requester,
                                   renewers=[f"{r.principal_type}:{r.principal_name}" for r in req.renewers],
                                   issue_timestamp=now, max_timestamp=max_ts, expiration_timestamp=expiry,
                                   token_id=token_id)
    ctx.broker.metadata.append([record])
    return R(error_code=0, principal_type=o_type, principal_name=o_name, token_requester_principal_type=r_type,
             token_requester_principal_name=r_name, issue_timestamp_ms=now, expiry_timestamp_ms=expiry,
             max_timestamp_ms=max_ts, token_id=token_id, hmac=tokens.token_hmac(config, token_id),
             throttle_time_ms=0)


def _change_expiry(ctx, mac: bytes, period_ms: int, renew: bool):
    code = _refused(ctx)
    if code is not None:
        return code, -1
    token = _find(ctx, mac)
    if token is None:
        return E.DELEGATION_TOKEN_NOT_FOUND, -1
    principal = _principal(ctx)
    if not _may_act(principal, token):
        return E.DELEGATION_TOKEN_OWNER_MISMATCH, -1
    now = int(time.time() * 1000)
    if token.expiration_timestamp < now:
        return E.DELEGATION_TOKEN_EXPIRED, -1
    if not renew and period_ms < 0:
        ctx.broker.metadata.append([RemoveDelegationTokenRecord(token_id=token.token_id)])
        return 0, now
    if renew and period_ms < 0:
        period_ms = ctx.broker.config.get_int("delegation.token.expiry.time.ms")
    expiry = min(now + period_ms, token.max_timestamp)
    ctx.broker.metadata.append([DelegationTokenRecord(
        owner=token.owner, requester=token.requester, renewers=list(token.renewers),
        issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp, expiration_timestamp=expiry,
        token_id=token.token_id)])
    return 0, expiry


@handles(ApiKey.RENEW_DELEGATION_TOKEN, 0, 2)
async def renew_delegation_token(ctx, req):
    code, expiry = _change_expiry(ctx, req.hmac, req.renew_period_ms, renew=True)
    return RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)


@handles(ApiKey.EXPIRE_DELEGATION_TOKEN, 0, 2)
async def expire_delegation_token(ctx, req):
    code, expiry = _change_expiry(ctx, req.hmac, req.expiry_time_period_ms, renew=False)
    return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=expiry, throttle_time_ms=0)


@handles(ApiKey.DESCRIBE_DELEGATION_TOKEN, 0, 3)
async def describe_delegation_token(ctx, req):
    R = DescribeDelegationTokenResponse
    code = _refused(ctx)
    if code is not None:
        return R(error_code=code, tokens=[], throttle_time_ms=0)
    principal = _principal(ctx)
    owners = None if req.owners is None else {f"{o.principal_type}:{o.principal_name}" for o in req.owners}
    authz = getattr(ctx.broker, "authorizer", None)
    out = []
    for token in ctx.broker.image.delegation_tokens.values():
        if owners is not None and token.owner not in owners:
            continue
        visible = _may_act(principal, token)
        if not visible and authz is not None:
            from broker.security.acls import DELEGATION_TOKEN, OPS
            from broker.security.authz import Check
            visible = Check(authz, ctx).allowed(OPS["DESCRIBE"], DELEGATION_TOKEN, token.token_id)
        if not visible:
            continue
        o_type, o_name = _split(token.owner)
        r_type, r_name = _split(token.requester)
        out.append(R.DescribedDelegationToken(
            principal_type=o_type, principal_name=o_name, token_requester_principal_type=r_type,
            token_requester_principal_name=r_name, issue_timestamp=token.issue_timestamp,
            expiry_timestamp=token.expiration_timestamp, max_timestamp=token.max_timestamp,
            token_id=token.token_id, hmac=tokens.token_hmac(ctx.broker.config, token.token_id),
            renewers=[R.DescribedDelegationTokenRenewer(principal_type=_split(r)[0], principal_name=_split(r)[1])
                      for r in token.renewers]))
    return R(error_code=0, tokens=out, throttle_time_ms=0)
