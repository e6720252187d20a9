"""ApiVersions: the versions this broker serves end to end."""
from __future__ import annotations

from kproto.api import ApiKey
from kproto.errors import ErrorCode
from kproto.messages.api_versions_response import ApiVersionsResponse

from broker.controller import features
from broker.handlers import ADVERTISED_WHEN, HANDLERS, handles

API_VERSIONS_RANGE = (0, 4)


def advertised(broker=None) -> list:
    return [ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi, _fn) in sorted(HANDLERS.items())
            if key not in ADVERTISED_WHEN or (broker is not None and ADVERTISED_WHEN[key](broker))]


def unsupported_version_response() -> ApiVersionsResponse:
    """What Kafka answers to an ApiVersions request above its range: a v0 body
    with UNSUPPORTED_VERSION listing only ApiVersions, so the client retries."""
    lo, hi = API_VERSIONS_RANGE
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=ApiKey.API_VERSIONS, min_version=lo, max_version=hi)])


@handles(ApiKey.API_VERSIONS, *API_VERSIONS_RANGE)
async def api_versions(ctx, req):
    resp = ApiVersionsResponse(error_code=0, api_keys=advertised(ctx.broker), throttle_time_ms=0)
    if ctx.api_version >= 3:
        if not _valid_software(req.client_software_name) or not _valid_software(req.client_software_version):
            resp.error_code = ErrorCode.INVALID_REQUEST
        elif ctx.conn is not None:
            ctx.conn.client_software = (req.client_software_name, req.client_software_version)
        image = ctx.broker.image
        resp.supported_features = [
            ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
            for name, (lo, hi) in sorted(features.SUPPORTED.items())
            # before v4 a feature with minimum 0 is left out (older clients reject it)
            if lo > 0 or ctx.api_version >= 4]
        # the offset of the metadata the levels were read from, as Kafka's image
        resp.finalized_features_epoch = max(image.offset, 0)
        levels = features.finalized(image)
        from broker.config.voters import kraft_version
        if kraft_version(ctx.broker) > 0:   # a dynamic quorum (KIP-853): kraft.version 1, as Kafka
            levels[features.KRAFT_VERSION] = kraft_version(ctx.broker)
        resp.finalized_features = [
            ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
            for name, level in sorted(levels.items())]
    return resp


def _valid_software(s: str) -> bool:
    # Kafka: letters, digits, '.', '-' and spaces are not allowed at the ends
    import re
    return bool(re.fullmatch(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?", s or ""))
