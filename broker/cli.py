"""`kproto` command line: `kproto serve` starts a broker."""
from __future__ import annotations

import argparse
import signal
import sys
import time

import trio

from broker import logging_setup


def _parse_set(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values or []:
        if "=" not in item:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def main(argv=None) -> None:
    started = time.monotonic()
    ap = argparse.ArgumentParser(prog="kproto", description="A Kafka-compatible broker.")
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start a single-node broker (broker and controller)")
    serve.add_argument("--config", help="a server.properties file with Kafka's property names")
    serve.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                       help="override one property (repeatable)")
    serve.add_argument("--log-level", default="WARNING", help="WARNING (default), INFO or DEBUG")
    args = ap.parse_args(argv)
    logging_setup.setup(args.log_level)

    from broker.config import BrokerConfig, ConfigError
    try:
        config = BrokerConfig.load(args.config, _parse_set(args.set))
    except ConfigError as exc:
        print(f"kproto: {exc}", file=sys.stderr)
        raise SystemExit(2)

    from broker.broker import Broker
    try:
        broker = Broker(config)
    except ConfigError as exc:   # kproto.metrics.listener is checked here
        print(f"kproto: {exc}", file=sys.stderr)
        raise SystemExit(2)
    try:
        trio.run(_serve, broker, started)
    except KeyboardInterrupt:
        pass


async def _serve(broker, started: float) -> None:
    async with trio.open_nursery() as nursery:
        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        addresses = await nursery.start(broker.run, progress)
        listing = ", ".join(addresses)
        metrics = f" metrics {broker.metrics_url}" if getattr(broker, "metrics_url", None) else ""
        print(f"kproto ready: {listing} (node {broker.node_id}, cluster {broker.cluster_id}, "
              f"data {broker.log_dir}){metrics} in {time.monotonic() - started:.2f} s", flush=True)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _sig in signals:
                break
        nursery.cancel_scope.cancel()
    broker.close()


if __name__ == "__main__":
    main()
