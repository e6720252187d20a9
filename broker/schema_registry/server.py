"""Serving the registry's ASGI app with hypercorn's trio worker on the
broker's event loop (no thread, no HTTP parser of ours)."""
from __future__ import annotations

import logging

import trio

log = logging.getLogger("kproto.schema_registry")


def hypercorn_config(settings, ssl_context=None):
    from hypercorn.config import Config

    class _Config(Config):
        """hypercorn's config with the broker's own SSLContext (its ssl.* settings: PEM, PKCS12
        or JKS stores, protocols, cipher suites, ssl.client.auth) instead of PEM file paths."""

        @property
        def ssl_enabled(self) -> bool:
            return ssl_context is not None

        def create_ssl_context(self):
            return ssl_context
    config = _Config()
    config.bind = [settings.bind]
    config.accesslog = None
    config.errorlog = logging.getLogger("kproto.schema_registry.http")
    config.graceful_timeout = 1.0
    config.keep_alive_timeout = 75.0   # clients keep connections for their session (requests' pool)
    return config


async def serve(app, config, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Bind, report the bound URL(s) through task_status, serve until cancelled."""
    from hypercorn.trio import serve as hypercorn_serve
    await hypercorn_serve(app, config, shutdown_trigger=trio.sleep_forever, mode="asgi", task_status=task_status)
