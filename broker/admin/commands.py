"""Registers the admin command families with the `kproto` command and runs one: settings
resolved, a cluster connection opened, the family's handler run, any failure turned into one
line on stderr and the exit code of broker/admin/errors.py."""
from __future__ import annotations

import importlib

from broker.admin.errors import AdminError
from broker.admin.settings import common_options

# command name -> module in broker.admin
FAMILIES = {"topic": "topics", "produce": "produce", "consume": "consume", "group": "groups",
            "cluster": "cluster_info", "acl": "acls", "user": "users"}


def add_parsers(sub) -> None:
    """Add every admin command to `kproto`'s subparsers. `kproto cluster` (the local cluster
    launcher) keeps its own verbs; the admin ones (info, health, quorum) join them."""
    common = common_options()

    def leaf(subparsers, name: str, help_text: str):
        return subparsers.add_parser(name, help=help_text, description=help_text, parents=[common])

    for command, module in FAMILIES.items():
        if command == "cluster":
            continue   # added by the launcher's parser (broker/cluster_tool.py) through add_cluster_verbs
        importlib.import_module(f"broker.admin.{module}").add_parser(sub, leaf)


def add_cluster_verbs(cluster_parser) -> None:
    """`kproto cluster info|health|quorum`: optional verbs of the launcher's parser (without a
    verb, `kproto cluster --nodes 3` still starts a local cluster)."""
    common = common_options()
    from broker.admin import cluster_info
    verbs = cluster_parser.add_subparsers(dest="action", required=False,
                                          title="admin verbs (without one: start a local cluster)")
    cluster_info.add_verbs(verbs, lambda s, name, h: s.add_parser(
        name, help=h, description=h, parents=[common]))


def handles(args) -> bool:
    if args.command == "cluster":
        return getattr(args, "action", None) is not None
    return args.command in FAMILIES


def run(args) -> int:
    """Run a parsed admin command; the process exit code."""
    from broker.admin import output
    from broker.admin.client import Admin
    from broker.admin.settings import resolve
    module = importlib.import_module(f"broker.admin.{FAMILIES[args.command]}")
    try:
        settings = resolve(args)
        settings["request.timeout.ms"] = str(args.timeout_ms)
        with Admin(settings) as admin:
            return module.run(args, admin)
    except AdminError as exc:
        output.error_line(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # `kproto consume ... | head`
        return 0
