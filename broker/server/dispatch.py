"""Turns a request frame into response chunks: header parsing, the
UNSUPPORTED_VERSION answer for ApiVersions, handler lookup and encoding,
UNKNOWN_SERVER_ERROR when a handler fails."""
from __future__ import annotations

import functools
import logging
import time

from kproto import api
from kproto._codec import DecodeError, UnsupportedVersionError, i32
from kproto.api import ApiKey
from kproto.errors import ErrorCode

from kproto.error_response import error_response

from broker.net.transport import CloseConnection
from broker.handlers import HANDLERS, load_served
from broker.handlers.api_versions import unsupported_version_response
from broker.handlers import topic_ids
# (the ACL checks, the SASL gate and the quota accounting are imported at first use: a PLAINTEXT
# broker without authorizer.class.name or client quotas never runs them)
from broker.security.session import RespondThenClose

log = logging.getLogger("kproto.dispatch")


class RequestContext:
    __slots__ = ("broker", "conn", "header", "api_key", "api_version", "correlation_id",
                 "client_id", "received_ms", "started", "remote_s", "quota_recorded_at", "quota_throttle_ms")

    def __init__(self, broker, conn, header, api_version, started: float | None = None):
        self.broker = broker
        self.conn = conn
        self.header = header
        self.api_key = header.request_api_key
        self.api_version = api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        self.received_ms = int(time.time() * 1000)
        # client quotas (broker/security/throttle.py): when the frame arrived (perf_counter), how
        # long the request waited in purgatory, and what a handler that records itself decided
        self.started = time.perf_counter() if started is None else started
        self.remote_s = 0.0
        self.quota_recorded_at = None
        self.quota_throttle_ms = 0


async def _mutation_limited(mutation_quotas, handler, ctx, request):
    from broker.security import mutations as security_mutations   # imported at the first quota
    return await security_mutations.run(mutation_quotas, ctx, request, handler)


def _mutation_apis() -> dict:
    from broker.security.mutations import STRICT_FROM   # imported at the first quota
    return STRICT_FROM


class Dispatcher:
    def __init__(self, broker):
        self.broker = broker
        load_served()
        self.handlers = HANDLERS   # (a controller listener's is smaller: broker/quorum/sole_controller.py)

    def _frame(self, api_key: int, version: int, correlation_id: int, response) -> list:
        out = bytearray(8)
        i32.pack_into(out, 4, correlation_id)
        if api.response_header_version(api_key, version) >= 1:
            out.append(0)  # empty tagged-field section
        regions = []
        response.encode_into(out, version, regions, strict=False)
        size = len(out) - 4 + sum(r.length for _, r in regions)
        i32.pack_into(out, 0, size)
        if not regions:
            return [out]
        chunks, start = [], 0
        for pos, region in regions:
            chunks.append(out[start:pos])
            chunks.append(region)
            start = pos
        chunks.append(out[start:])
        return chunks

    async def handle(self, frame, conn) -> list | None:
        """Response chunks for one request frame, or None when the request
        gets no answer (Produce with acks=0)."""
        arrived = time.perf_counter()
        session = getattr(conn, "session", None)
        if session is not None and session.raw_tokens:
            # after SaslHandshake v0 the client sends bare SASL tokens
            from broker.security import gate as security_gate   # imported at first use: SASL listeners only
            return security_gate.raw_token(session, frame, CloseConnection)
        try:
            api_key, version, correlation_id = api.peek_header(frame)
        except DecodeError as exc:
            raise CloseConnection(str(exc)) from None
        entry = self.handlers.get(api_key)
        if entry is None:
            raise CloseConnection(f"unknown or unsupported API key {api_key}")
        lo, hi, handler = entry
        if session is not None and session.sasl:
            from broker.security import gate as security_gate   # imported at first use: SASL listeners only
            security_gate.check(session, api_key, len(frame), CloseConnection)
        if not lo <= version <= hi:
            if api_key == ApiKey.API_VERSIONS and version > hi:
                return self._frame(api_key, 0, correlation_id, unsupported_version_response())
            raise CloseConnection(f"unsupported version {version} of API {api_key}")
        quorum = getattr(self.broker, "quorum", None)
        if quorum is not None:   # a multi-node quorum: metadata changes go to the active controller
            handler = quorum.wrap(api_key, handler)
        try:
            header, request = api.decode_request(frame)
        except (DecodeError, UnsupportedVersionError) as exc:
            raise CloseConnection(f"malformed request (api {api_key} v{version}): {exc}") from None
        broker = self.broker
        ctx = RequestContext(broker, conn, header, version, arrived)
        # Produce v13, OffsetCommit/OffsetFetch v10 name topics by id: resolved before the handler, and
        # the answer's names turned back into ids after it
        by_id = topic_ids.uses_ids(api_key, version)
        if by_id:
            topic_ids.resolve_request(broker, api_key, version, request)
        quotas = getattr(broker, "quotas", None)
        if quotas is not None and quotas.active and api_key in _mutation_apis():
            # controller_mutation_rate: topics over the quota are refused before the handler runs
            handler = functools.partial(_mutation_limited, quotas.mutations, handler)
        try:
            authorizer = getattr(broker, "authorizer", None)
            if authorizer is not None:
                # ACLs: the parts of the request the principal may not touch get Kafka's errors
                from broker.security import authz as security_authz   # imported at first use (an authorizer)
                response = await security_authz.run(authorizer, ctx, request, handler)
            else:
                response = await handler(ctx, request)
        except CloseConnection:
            raise
        except RespondThenClose as exc:
            close = CloseConnection(str(exc))
            close.chunks = self._frame(api_key, version, correlation_id, exc.response)
            close.delay_s = exc.delay_s
            raise close from None
        except Exception as exc:
            failures = getattr(self.broker, "dir_failures", None)
            if failures is not None:
                failures.report(exc)     # a failed disk: logged once there, the broker halts if it was the last
            # Kafka answers UNKNOWN_SERVER_ERROR and keeps the connection
            return self._internal_error(api_key, version, correlation_id, header, request)
        if by_id:
            topic_ids.fill_response(broker, api_key, version, response)
        if quotas is not None and quotas.active:   # (again: the handler may have set the first quota)
            return self._throttled(quotas, ctx, frame, response)
        if response is None:
            return None
        return self._frame(api_key, version, correlation_id, response)

    def _internal_error(self, api_key, version, correlation_id, header, request) -> list:
        name = api.request_class(api_key).NAME.removesuffix("Request")
        log.exception("unexpected error handling %s v%d (correlation id %d, client %s)",
                      name, version, correlation_id, header.client_id)
        if api_key == ApiKey.PRODUCE and getattr(request, "acks", None) == 0:
            raise CloseConnection(f"acks=0 {name} failed") from None  # (no answer to send)
        response = error_response(api_key, version, request, ErrorCode.UNKNOWN_SERVER_ERROR)
        if response is None:
            raise CloseConnection(f"{name} failed and has no error field to answer with") from None
        return self._frame(api_key, version, correlation_id, response)

    def _throttled(self, quotas, ctx, frame, response):
        """Client quotas: account the request, put the throttle time in the response."""
        from broker.security import throttle as security_throttle   # imported at the first quota
        chunks = None if response is None else self._frame(ctx.api_key, ctx.api_version,
                                                           ctx.correlation_id, response)
        throttle = security_throttle.account(quotas, ctx, len(frame))
        if (throttle and chunks is not None and hasattr(response, "throttle_time_ms")
                and throttle > (response.throttle_time_ms or 0)):
            response.throttle_time_ms = throttle
            chunks = self._frame(ctx.api_key, ctx.api_version, ctx.correlation_id, response)
        return chunks
