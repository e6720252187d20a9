"""How long creating a topic stalls the broker's other connections.

A thread sends ApiVersions about every millisecond on its own connection
while an Admin client creates a topic of N partitions; the longest round
trip seen is how long the event loop was busy creating partitions (their
directories, files and indexes) instead of serving. Repeated --rounds times
on a fresh single-node kproto broker.

    python -m tools.bench create_stall [--partitions 50] [--rounds 3]
"""
from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

from broker.net.framing import recv_exact


def _ping_loop(host: str, port: int, stop: threading.Event, round_trips: list) -> None:
    body = struct.pack(">hhih", 18, 0, 1, 1) + b"x"     # ApiVersions v0, client id "x"
    frame = struct.pack(">i", len(body)) + body
    with socket.create_connection((host, port)) as s:
        while not stop.is_set():
            t = time.perf_counter()
            s.sendall(frame)
            n = struct.unpack(">i", recv_exact(s, 4))[0]
            recv_exact(s, n)
            round_trips.append(time.perf_counter() - t)
            time.sleep(0.001)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench create_stall", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.launch.process import BrokerProcess
    broker = BrokerProcess()
    broker.start()
    try:
        host, port = broker.bootstrap.rsplit(":", 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for rnd in range(args.rounds):
            stop, round_trips = threading.Event(), []
            pinger = threading.Thread(target=_ping_loop, args=(host, int(port), stop, round_trips))
            pinger.start()
            time.sleep(0.3)
            t = time.perf_counter()
            topic = f"stall-{rnd}"
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(timeout=60)
            created = time.perf_counter() - t
            time.sleep(0.3)
            stop.set()
            pinger.join()
            print(f"round {rnd}: CreateTopics({args.partitions} partitions) {created * 1000:.0f} ms; "
                  f"longest ApiVersions round trip {max(round_trips) * 1000:.1f} ms "
                  f"({len(round_trips)} sent)", flush=True)
    finally:
        broker.stop()
