"""`kproto` command line: `kproto serve` starts a broker."""
from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import time

from broker.launch import logging_setup


def _parse_set(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values or []:
        if "=" not in item:
            _fail(f"--set expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def main(argv=None) -> None:
    # `serve` imports ~650 modules, whose objects (functions, classes, codec tables) live as long
    # as the process; the cyclic collector's passes over them while they load find nothing to
    # free and cost ~5% of a single node's start-up CPU. Off until the broker is built (or until
    # another command starts its work); a caller of main() (the tests) gets the collector back.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _main(argv, collecting)
    finally:
        if collecting:
            gc.enable()


def _main(argv, collecting: bool) -> None:
    started = time.monotonic()
    ap = argparse.ArgumentParser(prog="kproto", description="A Kafka-compatible broker.")
    from broker.launch.version import KAFKA_VERSION, VERSION
    ap.add_argument("--version", action="version", version=f"kproto {VERSION} (Kafka {KAFKA_VERSION} protocol)")
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start a single-node broker (broker and controller)")
    serve.add_argument("--config", help="a server.properties file with Kafka's property names")
    serve.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                       help="override one property (repeatable)")
    serve.add_argument("--log-level", default="WARNING", help="WARNING (default), INFO or DEBUG")
    words = sys.argv[1:] if argv is None else list(argv)
    # `kproto serve` parses only its own options: the other commands' parsers (storage, cluster
    # and the admin verbs, with their imports) cost a broker's start-up ~40 ms of CPU for nothing
    if words[:1] != ["serve"]:
        from broker.launch import storage_tool
        storage_tool.add_parser(sub)
        from broker.launch import cluster_tool
        cluster_tool.add_parser(sub)
        from broker.admin import commands as admin_commands   # topic, produce, consume, group, ... (docs/cli.md)
        admin_commands.add_parsers(sub)
        admin_commands.add_cluster_verbs(sub.choices["cluster"])
    args = ap.parse_args(argv)
    if args.command != "serve" and collecting:
        gc.enable()   # (an admin command may run for long: consume)
    if args.command != "serve" and admin_commands.handles(args):
        raise SystemExit(admin_commands.run(args))
    if args.command == "storage":
        raise SystemExit(storage_tool.run(args))
    if args.command == "cluster":
        raise SystemExit(cluster_tool.run(args))
    from broker.launch.startup_errors import LOG_LEVELS, explain
    if args.log_level.upper() not in LOG_LEVELS:
        _fail(f"unknown --log-level {args.log_level!r}: use WARNING (default), INFO or DEBUG")
    logging_setup.setup(args.log_level)
    from broker.storage.limits import raise_open_files_limit
    # each hosted partition holds a descriptor: use what the hard limit allows, as the JVM does
    before, after = raise_open_files_limit()
    if after != before:
        logging.getLogger("kproto").info("open files limit raised from %d to %d (the hard limit)", before, after)

    from broker.config import BrokerConfig, ConfigError
    if args.config is not None and not os.path.isfile(args.config):
        _fail(f"--config {args.config}: no such file (give the path of a server.properties file)")
    try:
        config = BrokerConfig.load(args.config, _parse_set(args.set))
    except ConfigError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"--config {args.config}: cannot read it: {exc.strerror or exc}")
    if config.kraft is None:
        from broker.config.kraft import ZOOKEEPER_REFUSAL
        _fail(ZOOKEEPER_REFUSAL)

    from broker.quorum.startup import StartupError, prepare_storage
    try:
        prepare_storage(config)
    except StartupError as exc:
        _fail(str(exc))

    from broker.broker import Broker
    try:
        broker = Broker(config)
    except ConfigError as exc:   # kproto.metrics.listener is checked here
        _fail(str(exc))
    state = {"ready": False}
    if collecting:
        # the imports' objects go straight to the permanent generation (as the ready line's
        # freeze does with the rest): enabled as they were, the collector would walk all of
        # them at its first pass. The garbage the imports left stays (~2k objects, ~0.5 MiB:
        # attrs' class builders and other class-creation cycles, mostly trio's), a full pass
        # (~25 ms) to free it; storage recovery and serving allocate and drop as usual.
        gc.freeze()
        gc.enable()
    import trio
    try:
        trio.run(_serve, broker, started, state)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # (trio wraps task errors in exception groups)
        message = None if state["ready"] else explain(exc, getattr(broker, "log_dir", None))
        if message is None:
            raise
        _fail(message)


def _fail(message: str) -> None:
    """A start-up mistake: one line, exit code 1, no traceback."""
    print(f"kproto: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def _freeze_startup_objects() -> None:
    """Start-up's objects (modules, codec tables, config, recovered state)
    live as long as the process: gc.freeze() takes them out of the cyclic
    collector's sight, so a full (generation 2) collection under load walks
    only what serving created instead of pausing the event loop 5-10 ms
    for ~45k objects that are never garbage (docs/performance.md)."""
    import gc
    gc.collect()
    gc.freeze()


async def _serve(broker, started: float, state: dict) -> None:
    import trio
    async with trio.open_nursery() as nursery:
        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        broker.freeze_made_logs = True   # (this process is the broker's: see _freeze_startup_objects)
        from broker.launch.heap_trim import trim_heap_periodically
        nursery.start_soon(trim_heap_periodically)   # (glibc's kept free memory: this process's too)
        addresses = await nursery.start(broker.run, progress)
        listing = ", ".join(addresses)
        from broker.launch.version import VERSION
        metrics = f" metrics {broker.metrics_url}" if getattr(broker, "metrics_url", None) else ""
        if getattr(broker, "schema_registry_url", None):
            metrics += f" schema registry {broker.schema_registry_url}"
        # the handlers are in place before the ready line: a SIGTERM right
        # after it is a clean shutdown, not a kill
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            _freeze_startup_objects()
            print(f"kproto ready: {listing} (kproto {VERSION}, node {broker.node_id}, "
                  f"cluster {broker.cluster_id}, data {broker.log_dir}){metrics} "
                  f"in {time.monotonic() - started:.2f} s", flush=True)
            state["ready"] = True  # (errors from here on are not start-up mistakes)
            async for _sig in signals:
                break
            # controlled shutdown of a multi-node broker (broker/quorum/shutdown.py)
            from broker.quorum.shutdown import before_exit
            await before_exit(broker, signals)
        nursery.cancel_scope.cancel()
    broker.close()


if __name__ == "__main__":
    main()
