"""`kproto cluster --nodes 3`: a local KRaft cluster, or the node-group of several broker processes
on one machine. It writes one server.properties per node (combined broker,controller nodes, or
--controllers K voters and the rest broker-only; `broker.rack` the machine's host name unless
--rack says otherwise), formats every node with `kproto storage format` and one cluster id, starts
`kproto serve` for each, prints the bootstrap servers and the data directories, and stops them
all on Ctrl-C. Run it again with the same --dir to restart the same cluster (no new format)."""
from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="run a local multi-node KRaft cluster (development)")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes (default 3)")
    p.add_argument("--controllers", type=int, default=None,
                   help="voters; the other nodes are broker-only (default: every node is broker,controller)")
    p.add_argument("--dir", default=None, help="where the nodes' configs and data go (default: a new temp dir)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--base-port", type=int, default=20092,
                   help="node i listens on base+i-1, its controller listener on base+100+i-1, its schema "
                        "registry on base+200+i-1 (default 20092)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="a property for every node (repeatable)")
    p.add_argument("--rack", default=None,
                   help="broker.rack of every node: these processes share one machine, so Kafka's rack-aware "
                        "placement keeps a partition's replicas on other machines' nodes (default: this "
                        "machine's host name; --rack '' leaves it unset)")
    p.add_argument("--log-level", default="WARNING")


def node_properties(i: int, nodes: int, controllers: int | None, host: str, base: int, data: str,
                    extra: dict, rack: str | None = None) -> dict:
    voters_n = nodes if controllers is None else controllers
    voters = ",".join(f"{v}@{host}:{base + 100 + v - 1}" for v in range(1, voters_n + 1))
    is_controller = i <= voters_n
    roles = ("broker,controller" if controllers is None else "controller") if is_controller else "broker"
    listeners = [] if roles == "controller" else [f"PLAINTEXT://{host}:{base + i - 1}"]
    if is_controller:
        listeners.append(f"CONTROLLER://{host}:{base + 100 + i - 1}")
    props = {"process.roles": roles, "node.id": str(i), "controller.quorum.voters": voters,
             "listeners": ",".join(listeners), "controller.listener.names": "CONTROLLER",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
             "log.dirs": data, "kproto.metrics.listener": "off"}
    if roles != "controller":
        props["inter.broker.listener.name"] = "PLAINTEXT"
        # the schema registry on every broker (base+200+i-1): any node serves it, one writes
        props["schema.registry.listeners"] = f"http://{host}:{base + 200 + i - 1}"
        if rack:
            props["broker.rack"] = rack
    props.update(extra)
    return props


def free_base_port(nodes: int, host: str = "127.0.0.1") -> int:
    """A --base-port whose node, controller and schema-registry ports (base+i, +100, +200) are
    all free here (tests and benches that start `kproto cluster`)."""
    from broker.launch.process import free_port

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
        return True
    for _ in range(50):
        base = free_port()
        if all(free(base + off + i) for off in (0, 100, 200) for i in range(nodes)):
            return base
    raise RuntimeError("no free base port")


def run(args) -> int:
    base_dir = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="kproto-cluster-"))
    os.makedirs(base_dir, exist_ok=True)
    extra = dict(item.split("=", 1) for item in args.set)
    rack = socket.gethostname() if args.rack is None else args.rack
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    configs, brokers, props_of = [], [], []
    for i in range(1, args.nodes + 1):
        data = os.path.join(base_dir, f"node{i}")
        props = node_properties(i, args.nodes, args.controllers, args.host, args.base_port, data, extra, rack)
        path = os.path.join(base_dir, f"node{i}.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        configs.append((i, path, data))
        props_of.append(props)
        if "broker" in props["process.roles"].split(","):
            brokers.append(f"{args.host}:{args.base_port + i - 1}")
        if not os.path.exists(os.path.join(data, "meta.properties")):
            subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", f"--cluster-id={cluster_id}",
                            "-c", path], check=True, stdout=subprocess.DEVNULL)
    # Ctrl-C and SIGTERM stop the cluster. Installed explicitly: a process started in the
    # background of a non-interactive shell inherits SIGINT ignored, and Python keeps it ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    procs = []
    try:
        _start_and_watch(args, base_dir, configs, brokers, props_of, procs)
        code = 1
    except KeyboardInterrupt:
        code = 0
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not leave nodes behind
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
    print("kproto cluster: stopped")
    return code


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _start_and_watch(args, base_dir, configs, brokers, props_of, procs) -> None:
    """Starts the nodes (appended to `procs` as they start) and returns when one exits."""
    for i, path, data in configs:
        log = open(os.path.join(base_dir, f"node{i}.log"), "ab")
        procs.append(subprocess.Popen([sys.executable, "-m", "broker.launch.cli", "serve", "--config", path,
                                       "--log-level", args.log_level], stdout=log, stderr=log))
    racks = sorted({p["broker.rack"] for p in props_of if p.get("broker.rack")})
    print(f"kproto cluster: {args.nodes} nodes, data in {base_dir}"
          + (f", broker.rack {','.join(racks)}" if racks else ""))
    for i, path, data in configs:
        print(f"  node {i}: config {path}, data {data}, log {os.path.join(base_dir, f'node{i}.log')}")
    print(f"bootstrap servers: {','.join(brokers)}", flush=True)
    registries = [p["schema.registry.listeners"] for p in props_of
                  if p.get("schema.registry.listeners", "off") != "off"]
    if registries:
        print(f"schema registry: {','.join(registries)}", flush=True)
    print("Ctrl-C stops the cluster", flush=True)
    while all(p.poll() is None for p in procs):
        time.sleep(0.5)
    dead = [i for (i, _, _), p in zip(configs, procs) if p.poll() is not None]
    print(f"kproto cluster: node(s) {dead} exited; see their logs. Stopping.", file=sys.stderr)
