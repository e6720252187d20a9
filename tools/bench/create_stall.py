"""How long creating a topic stalls the broker's other connections.

A thread sends ApiVersions about every millisecond on its own connection
while an Admin client creates a topic of N partitions; the longest round
trip seen is how long the event loop was busy creating partitions (their
directories, files and indexes) instead of serving. Repeated --rounds times
on a fresh single-node kproto broker.

--find-coordinator: each round on a new broker, the first FindCoordinator of a
group instead (which creates `__consumer_offsets`, 50 partitions), and the time
until a first OffsetCommit of that group is accepted.

    python -m tools.bench create_stall [--partitions 50] [--rounds 3] [--find-coordinator]
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


def _first_commit(bootstrap: str) -> None:
    """FindCoordinator of a group on a broker without `__consumer_offsets`, then OffsetCommit,
    each again until accepted (as a client retries COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS)."""
    from kproto.messages.find_coordinator_request import FindCoordinatorRequest
    from kproto.messages.offset_commit_request import OffsetCommitRequest
    from tests.wire_client import WireClient, create_topic
    create_topic(bootstrap, "committed", 1)
    T, P = OffsetCommitRequest.OffsetCommitRequestTopic, OffsetCommitRequest.OffsetCommitRequestPartition
    commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", retention_time_ms=-1,
                                 topics=[T(name="committed", partitions=[P(partition_index=0, committed_offset=1,
                                                                            commit_timestamp=-1)])])
    with WireClient(bootstrap) as c:
        for _ in range(3000):
            if not c.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4).coordinators[0].error_code:
                break
            time.sleep(0.01)
        for _ in range(3000):
            if not c.call(commit, 7).topics[0].partitions[0].error_code:
                return
            time.sleep(0.01)
    raise SystemExit("the first OffsetCommit was not accepted")


def _find_coordinator_rounds(rounds: int) -> None:
    from broker.launch.process import BrokerProcess
    for rnd in range(rounds):
        broker = BrokerProcess()
        broker.start()
        try:
            host, port = broker.bootstrap.rsplit(":", 1)
            stop, round_trips = threading.Event(), []
            pinger = threading.Thread(target=_ping_loop, args=(host, int(port), stop, round_trips))
            pinger.start()
            time.sleep(0.3)
            t = time.perf_counter()
            _first_commit(broker.bootstrap)
            done = time.perf_counter() - t
            time.sleep(0.3)
            stop.set()
            pinger.join()
            print(f"round {rnd}: first FindCoordinator to first OffsetCommit accepted {done * 1000:.0f} ms; "
                  f"longest ApiVersions round trip {max(round_trips) * 1000:.1f} ms "
                  f"({len(round_trips)} sent)", flush=True)
        finally:
            broker.stop()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench create_stall", description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--find-coordinator", action="store_true",
                    help="the first FindCoordinator of a fresh broker (creates __consumer_offsets)")
    args = ap.parse_args(argv)
    if args.find_coordinator:
        _find_coordinator_rounds(args.rounds)
        return
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
