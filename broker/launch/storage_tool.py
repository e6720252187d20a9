"""`kproto storage format | info | random-uuid`: Kafka 3.9's kafka-storage.sh (kafka.tools.StorageTool)
with its options, output text, refusals and exit codes (0, or 1 with one line on stderr)."""
from __future__ import annotations

import argparse
import os
import sys

from kproto.metadata.feature_level_record import FeatureLevelRecord

from broker.config import BrokerConfig, ConfigError
from broker.controller import features
from broker.quorum import formatter
from broker.config import voters as dynamic_voters
from broker.quorum.formatter import FormatError
from broker.storage.checkpoints import read_meta_properties, uuid_to_str

LEGACY = ("The kafka configuration file appears to be for a legacy cluster. Formatting is only "
          "supported for clusters in KRaft mode.")


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # argparse4j's handleError: usage, the error, exit code 1
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def add_parser(sub) -> None:
    storage = sub.add_parser("storage", help="format and inspect log directories (kafka-storage.sh)",
                             description="The Kafka storage tool.")
    commands = storage.add_subparsers(dest="storage_command", required=True, parser_class=_Parser)
    info = commands.add_parser("info", help="Get information about the Kafka log directories on this node.")
    fmt = commands.add_parser("format", help="Format the Kafka log directories on this node.")
    commands.add_parser("random-uuid", help="Print a random UUID.")
    for p in (info, fmt):
        p.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true")
    fmt.add_argument("--release-version", "-r",
                     help="The release version to use for the initial feature settings. The minimum is "
                          f"3.0-IV1; the default is {formatter.LATEST_PRODUCTION}")
    # transaction.version is applied (a Kafka 4.x feature, as its StorageTool does); the
    # others are accepted and, as by Kafka 3.9.0's StorageTool, not applied
    fmt.add_argument("--feature", "-f", action="append",
                     help="The setting to use for a specific feature, in feature=level format. For "
                          "example: `kraft.version=1`.")
    fmt.add_argument("--add-scram", "-S", action="append",
                     help="A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g. "
                          "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
                          "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'")
    group = fmt.add_mutually_exclusive_group()
    group.add_argument("--standalone", "-s", action="store_true",
                       help="Used to initialize a controller as a single-node dynamic quorum.")
    group.add_argument("--no-initial-controllers", "-N", action="store_true",
                       help="Used to initialize a server without a dynamic quorum topology.")
    group.add_argument("--initial-controllers", "-I",
                       help="Used to initialize a server with a specific dynamic quorum topology. The "
                            "argument is a comma-separated list of id@hostname:port:directory. The same "
                            "values must be used to format all nodes.")


def run(args, out=print) -> int:
    if args.storage_command == "random-uuid":
        out(uuid_to_str(formatter.random_uuid()))
        return 0
    try:
        config = BrokerConfig.load(args.config, embedded_defaults=False)
        if args.storage_command == "info":
            return info(config, out)
        format_command(args, config, out)
        return 0
    except OSError as exc:
        print(f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc), file=sys.stderr)
        return 1
    except (ConfigError, FormatError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 1


def log_directories(config: BrokerConfig) -> list[str]:
    """StorageTool.configToLogDirectories: log dirs and the metadata log dir, sorted, as written."""
    dirs = set(config.log_dirs)
    if config.kraft is not None:
        dirs.add(config.kraft.metadata_log_dir)
    elif config.get("metadata.log.dir"):
        dirs.add(config.get("metadata.log.dir"))
    else:
        dirs.add(config.log_dirs[0])
    return sorted(dirs)


def format_command(args, config: BrokerConfig, out) -> None:
    k = config.kraft
    if k is None:
        raise FormatError(LEGACY)
    release = args.release_version or config.static_configs.get("inter.broker.protocol.version") \
        or formatter.LATEST_PRODUCTION
    initial = None
    if args.initial_controllers:
        initial = dynamic_voters.parse(args.initial_controllers)
    if args.standalone:
        if not k.is_controller:
            raise FormatError("You can only use --standalone on a controller.")
        endpoints = k.advertised_controller_endpoints
        if not endpoints:
            raise FormatError("No controller listeners found.")
        e = endpoints[0]
        initial = dynamic_voters.parse(
            f"{k.node_id}@{e.host or 'localhost'}:{e.port}:{uuid_to_str(formatter.random_uuid())}")
    if not args.no_initial_controllers and k.is_controller and not k.voters and initial is None:
        raise FormatError("Because controller.quorum.voters is not set on this controller, you must "
                          "specify one of the following: --standalone, --initial-controllers, or "
                          "--no-initial-controllers.")
    formatter.format_directories(
        node_id=k.node_id, cluster_id=args.cluster_id, directories=log_directories(config),
        metadata_log_dir=k.metadata_log_dir, controller_listener=(k.controller_listener_names or [""])[0],
        release=release, initial_controllers=initial, ignore_formatted=args.ignore_formatted, out=out,
        extra_records=_scram_records(getattr(args, "add_scram", None))
        + _feature_records(getattr(args, "feature", None)))


def _feature_records(entries) -> list:
    """--feature transaction.version=N: its FeatureLevelRecord in the bootstrap metadata."""
    out = []
    for entry in entries or []:
        name, sep, level = entry.partition("=")
        if not sep or not level.strip().lstrip("-").isdigit():
            raise FormatError(f"Can't parse feature={entry}. The format must be feature=level.")
        name, level = name.strip(), int(level)
        if name not in (features.TRANSACTION_VERSION, features.SHARE_VERSION):
            continue
        lo, hi = features.SUPPORTED[name]
        if not lo <= level <= hi:
            raise FormatError(f"Unsupported value {level} for {name}. Supported levels are {lo}-{hi}.")
        if level > 0 or name in features.DEFAULT_LEVELS:     # (share.version=0: off from the start)
            out.append(FeatureLevelRecord(name=name, feature_level=level))
    return out


def _scram_records(entries) -> list:
    """--add-scram credentials (broker/quorum/scram_bootstrap.py)."""
    if not entries:
        return []
    from broker.quorum.scram_bootstrap import parse
    return [parse(e) for e in entries]


def info(config: BrokerConfig, out) -> int:
    """StorageTool.infoCommand."""
    directories = log_directories(config)
    problems, found = [], []
    first = None
    for d in sorted(directories):
        if not os.path.isdir(d):
            problems.append(f"{d} does not exist" if not os.path.exists(d) else f"{d} is not a directory")
            continue
        found.append(d)
        path = os.path.join(d, formatter.META_PROPERTIES)
        if not os.path.exists(path):
            problems.append(f"{d} is not formatted.")
            continue
        try:
            props = read_meta_properties(path)
        except OSError as exc:
            problems.append(f"Error loading {path}: {exc}")
            continue
        if first is None:
            first = props
        elif first.get("cluster.id") != props.get("cluster.id"):
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.get("node.id") != props.get("node.id"):
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None:
        v1 = first.get("version") == "1"
        if config.kraft is not None and not v1:
            problems.append("The kafka configuration file appears to be for a cluster in KRaft mode, but "
                            "the directories are formatted for legacy mode.")
        elif config.kraft is None and v1:
            problems.append("The kafka configuration file appears to be for a legacy cluster, but the "
                            "directories are formatted for a cluster in KRaft mode.")
    if not directories:
        out("No directories specified.")
        return 0
    if found:
        out("Found log directory:" if len(found) == 1 else "Found log directories:")
        for d in found:
            out(f"  {d}")
        out("")
    if first is not None:
        # MetaProperties.toProperties in a TreeMap: keys sorted, Java's {k=v, ...} form
        out("Found metadata: {" + ", ".join(f"{k}={first[k]}" for k in sorted(first)) + "}")
        out("")
    if problems:
        out("Found problem:" if len(problems) == 1 else "Found problems:")
        for p in problems:
            out(f"  {p}")
        out("")
        return 1
    return 0
