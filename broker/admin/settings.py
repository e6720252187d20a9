"""Where the admin CLI's connection settings come from, lowest first: a properties file
(`--command-config`, or the file named by KPROTO_COMMAND_CONFIG), KPROTO_BROKERS, `--brokers`, then
each `-X key=value`. Keys are librdkafka's (`bootstrap.servers`, `security.protocol`,
`sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`, `ssl.certificate.location`,
`ssl.key.location`, `ssl.endpoint.identification.algorithm`); the Java client's `sasl.jaas.config`
and PEM `ssl.truststore.location` are read too, so one file serves Kafka's tools and kproto's."""
from __future__ import annotations

import argparse
import os
import re

from broker.admin.connection import MECHANISMS, PROTOCOLS
from broker.admin.errors import USAGE, AdminError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def common_options() -> argparse.ArgumentParser:
    """The options every admin command takes (an argparse parent)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("connection")
    g.add_argument("-b", "--brokers", help="bootstrap host:port[,host:port] (env KPROTO_BROKERS; "
                   f"default {DEFAULT_BOOTSTRAP})")
    g.add_argument("-X", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a client setting, librdkafka's names (security.protocol, sasl.mechanism, "
                   "sasl.username, sasl.password, ssl.ca.location, ...); repeatable")
    g.add_argument("--command-config", metavar="FILE",
                   help="a properties file of client settings (env KPROTO_COMMAND_CONFIG)")
    g.add_argument("--timeout-ms", type=int, default=30000, help="per-request timeout (default 30000)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="table for people (default), json for scripts")
    return p


def _read_properties(path: str) -> dict:
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise AdminError(f"--command-config {path}: cannot read it: {exc.strerror or exc}", USAGE) from None
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def resolve(args) -> dict:
    """The settings dict for a parsed command line."""
    settings: dict[str, str] = {}
    path = args.command_config or os.environ.get("KPROTO_COMMAND_CONFIG")
    if path:
        settings.update(_read_properties(path))
    if os.environ.get("KPROTO_BROKERS"):
        settings["bootstrap.servers"] = os.environ["KPROTO_BROKERS"]
    if args.brokers:
        settings["bootstrap.servers"] = args.brokers
    for item in args.settings:
        if "=" not in item:
            raise AdminError(f"-X expects key=value, got {item!r}", USAGE)
        k, v = item.split("=", 1)
        settings[k.strip()] = v.strip()
    # the Java client's names
    if "sasl.mechanisms" in settings:
        settings.setdefault("sasl.mechanism", settings["sasl.mechanisms"])
    jaas = settings.get("sasl.jaas.config")
    if jaas:
        for key in ("username", "password"):
            m = re.search(key + r'\s*=\s*"([^"]*)"', jaas)
            if m:
                settings.setdefault(f"sasl.{key}", m.group(1))
    if settings.get("ssl.truststore.location") and settings.get("ssl.truststore.type", "PEM").upper() == "PEM":
        settings.setdefault("ssl.ca.location", settings["ssl.truststore.location"])
    settings.setdefault("bootstrap.servers", DEFAULT_BOOTSTRAP)
    protocol = settings.setdefault("security.protocol", "PLAINTEXT").upper()
    settings["security.protocol"] = protocol
    if protocol not in PROTOCOLS:
        raise AdminError(f"security.protocol {protocol}: use one of {', '.join(PROTOCOLS)}", USAGE)
    mech = settings.get("sasl.mechanism")
    if mech and mech.upper() not in MECHANISMS:
        raise AdminError(f"sasl.mechanism {mech}: use one of {', '.join(MECHANISMS)}", USAGE)
    return settings


def bootstrap_addresses(settings: dict) -> list[tuple[str, int]]:
    out = []
    for item in settings["bootstrap.servers"].split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise AdminError(f"bootstrap.servers: {item!r} is not host:port", USAGE)
        out.append((host.strip("[]"), int(port)))
    return out
