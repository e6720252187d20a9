"""The trio shell around raft.node.RaftNode: real sockets, a storage object,
timers. It does what a Ready says, in its order (docs/architecture.md,
"Metadata quorum"), and nothing else; every decision is the node's.

Wire: Kafka framing and kproto's codecs (raft/convert.py). Each node keeps
one outgoing connection per peer (requests pipelined, answers in order) and
answers the peers' requests on the connections they open. Requests it could
not deliver are simply lost: the node retries on its own timers.

Storage is an object with write_quorum_state(qs), apply(op) for the log
operations, fsync() (blocking; run in a thread) and write_snapshot(sid,
data); MemoryStorage is the in-process one the tests use. The state machine
is three callbacks: on_commit(entries), on_load_snapshot(sid, data) and
take_snapshot(sid) -> bytes.
"""
from __future__ import annotations

import logging
import struct
import sys
from collections import deque
from typing import Callable, Optional

import trio

from kproto import api
from kproto._codec import i32
from raft import convert
from raft import messages as m
from raft.node import LEADER, RaftNode

from broker.net.framing import take_frame
from broker.metadata.raft_metrics import RaftMetrics

log = logging.getLogger("kproto.quorum")
_SIZE = struct.Struct(">i")
MAX_FRAME = 64 * 1024 * 1024


class NotLeaderError(Exception):
    def __init__(self, leader_id: int, epoch: int):
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


class ProposalLostError(Exception):
    """This node stopped leading before the entries were known to be
    committed: they may be lost or may still commit under the next leader
    (Kafka's controller answers NOT_CONTROLLER; the client retries)."""


class VoterChangeError(Exception):
    """AddRaftVoter / RemoveRaftVoter refused or not committed: Kafka's error code and message."""
    def __init__(self, error: int, message: str):
        super().__init__(message or f"error {error}")
        self.error = error
        self.message = message


class MemoryStorage:
    """Keeps everything in memory; fsync is immediate."""

    # fsync runs in the trio thread: a worker thread would let a MockClock (the tests) jump to the
    # next timer while it runs, which made the tests' timings depend on the machine's load
    fsync_in_thread = False

    def __init__(self):
        self.quorum_state = m.QuorumState()
        self.entries: list = []
        self.snapshot = None

    def write_quorum_state(self, qs):
        self.quorum_state = qs

    def apply(self, op):
        if isinstance(op, m.Append):
            self.entries.extend(op.entries)
        elif isinstance(op, m.Truncate):
            self.entries = [e for e in self.entries if e.offset < op.end_offset]
        elif isinstance(op, m.InstallSnapshot):
            self.snapshot = (op.snapshot_id, op.data)
            self.entries = []
        elif isinstance(op, m.DeleteBefore):
            self.entries = [e for e in self.entries if e.offset >= op.offset]

    def fsync(self):
        pass

    def write_snapshot(self, sid, data):
        self.snapshot = (sid, data)


def _frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


async def _read_frame(stream, buf: bytearray) -> bytes:
    while (frame := take_frame(buf, MAX_FRAME)) is None:
        data = await stream.receive_some(65536)
        if not data:
            raise EOFError
        buf += data
    return frame


def _refused(exc: OSError) -> bool:
    """The connect was refused (trio groups the attempts' errors in the cause)."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    group = exc.__cause__
    return isinstance(group, BaseExceptionGroup) and bool(group.exceptions) and all(
        isinstance(e, ConnectionRefusedError) for e in group.exceptions)


def _request_src(msg) -> int:
    if isinstance(msg, m.VoteRequest):
        return msg.candidate_id
    if isinstance(msg, (m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)):
        return msg.leader_id
    return msg.replica_id


_RAFT_APIS = {52, 53, 54, 1, 59}
_CLUSTER_AUTHORIZATION_FAILED = 31
try:   # a refused login / TLS handshake on an outgoing connection (broker/security/outbound.py)
    from broker.security.outbound import AuthenticationFailed as _AuthFailed
    from broker.security.outbound import expiring as _expiring
    _AUTH_ERRORS = (_AuthFailed,)
except ImportError:   # (raft tests may use the shell without the broker package's extras)
    _AUTH_ERRORS = ()
    _expiring = lambda stream: False  # noqa: E731
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER = 80, 81
# a broken connection (both halves may fail at once: a group of them) costs the connection only
_CONN_ERRORS = (OSError, EOFError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError,
                ExceptionGroup)


class QuorumShell:
    def __init__(self, node: RaftNode, peers: dict, storage=None, cluster_id: str = "kproto",
                 on_commit: Optional[Callable] = None,
                 on_load_snapshot: Optional[Callable] = None,
                 take_snapshot: Optional[Callable] = None,
                 on_leader: Optional[Callable] = None):
        self.node = node
        self.peers = dict(peers)           # node id -> (host, port)
        self.storage = storage or MemoryStorage()
        self.cluster_id = cluster_id
        self.on_commit = on_commit or (lambda entries: None)
        self.on_load_snapshot = on_load_snapshot or (lambda sid, data: None)
        self.take_snapshot = take_snapshot
        self.on_leader = on_leader or (lambda change: None)
        self._wake = trio.Event()
        self._waiting_until = None         # the deadline the timer loop sleeps to (None: awake)
        self._outgoing = {}                # peer -> trio memory send channel
        self._inbound = {}                 # token -> (send channel, wire corr, api key, version)
        # replica id -> when (ms) the last inbound connection it fetched on closed while no other
        # was open: a crashed process's sockets close at once (broker/quorum/liveness.py reads it)
        self.fetch_links_closed: dict[int, int] = {}
        self._fetch_links: dict[int, int] = {}   # replica id -> inbound connections it fetches on
        self._token = 0
        self._waiters = {}                 # last offset -> [(epoch, event, result)]
        self._nursery = None
        self._fsync_running = False
        self._fsync_wanted = None
        self.leader = m.LeaderChange(m.NO_LEADER, node.epoch)
        self.raft_metrics = RaftMetrics()    # Kafka's raft-metrics (commit / election latency)
        # async (header, request, frame, conn) -> response chunks, for the non-raft APIs of the port
        self.other_requests = None
        # () -> the API keys the port serves (its ApiVersions), or None: any; another API closes the
        # connection, as Kafka's SocketServer does for an API the listener does not enable
        self.enabled_apis = None
        # security of the controller listener (broker/quorum/secure.py), all None on plaintext:
        # connect(host, port, client_id) -> stream: an outgoing connection, TLS and SASL done;
        # accept(stream) -> (stream, conn) or None: an incoming one's TLS handshake;
        # screen(conn, frame) -> response bytes (SASL exchange) or None to serve the frame; raises
        # to close the connection (a request before login, a principal without CLUSTER_ACTION)
        self.connect = None
        self.accept = None
        self.screen = None
        # (host, port) of this node's advertised controller listener, named to others as the
        # leader's endpoint (NodeEndpoints in responses); None: not said
        self.own_endpoint = None
        # the controller listener's name: AddRaftVoter must give the new voter's endpoint on it
        self.listener_name = None
        # this node's metadata directory id (a uuid.UUID) sent in its fetches, and the ones the
        # fetching replicas sent (KIP-853), for DescribeQuorum
        self.directory_id = None
        self.replica_directories: dict = {}

    # --------------------------------------------------------------- time

    @staticmethod
    def now_ms() -> int:
        return int(trio.current_time() * 1000)

    # ---------------------------------------------------------------- run

    async def run(self, listeners, *, task_status=trio.TASK_STATUS_IGNORED):
        """Serve on the given trio listeners until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for peer in self.peers:
                if peer != self.node.id:
                    send, recv = trio.open_memory_channel(1000)
                    self._outgoing[peer] = send
                    nursery.start_soon(self._peer_loop, peer, recv)
            if listeners:   # (an observer, a broker-only node, has no controller listener)
                nursery.start_soon(trio.serve_listeners, self._serve_conn, listeners)
            nursery.start_soon(self._timer_loop)
            self._pump()
            task_status.started()

    async def _timer_loop(self):
        while True:
            deadline = self.node.next_deadline_ms()
            self._waiting_until = deadline if deadline is not None else float("inf")
            with trio.move_on_at(deadline / 1000 if deadline is not None else float("inf")):
                await self._wake.wait()
            self._waiting_until = None
            self._wake = trio.Event()
            self.node.tick(self.now_ms())
            self._pump()

    # ------------------------------------------------------------ outputs

    def _pump(self):
        """Do what the node asks, in the Ready's order."""
        node = self.node
        for _ in range(1000):
            if not node.has_ready():
                break
            r = node.ready()
            if r.quorum_state is not None:
                self.storage.write_quorum_state(r.quorum_state)
            if r.voters is not None:
                self._voters_changed(r.voters)
            for op in r.log_ops:
                self.storage.apply(op)
            if r.sync_to is not None:
                self._request_fsync(r.sync_to)
            for env in r.messages:
                self._dispatch(env)
            if r.leader is not None:
                self.leader = r.leader
                self.on_leader(r.leader)
                if r.leader.leader_id != node.id:
                    self._fail_waiters()
            if r.load_snapshot is not None:
                self.on_load_snapshot(*r.load_snapshot)
            if r.committed:
                self.on_commit(r.committed)
            if r.high_watermark is not None:
                self._resolve_waiters(r.high_watermark)
            if r.snapshot_due is not None and self.take_snapshot is not None:
                data = self.take_snapshot(r.snapshot_due)
                self.storage.write_snapshot(r.snapshot_due, data)
                node.snapshot_taken(r.snapshot_due, data)
        self.raft_metrics.after_pump(node, trio.current_time())
        # wake the timer loop only if the node now wants a tick sooner than the loop sleeps to:
        # waking it on every pump made it spin (a core busy, and a MockClock never advanced)
        if self._waiting_until is not None:
            nd = node.next_deadline_ms()
            if nd is not None and nd < self._waiting_until:
                self._wake.set()

    def _voters_changed(self, voters):
        """A dynamic quorum's voter set changed: reach the new voters at their endpoints (the
        first endpoint of the controller listener the voter set names)."""
        for v in voters:
            if v.endpoints:
                _, host, port = v.endpoints[0]
                self.learn_endpoint(v.node_id, host, port)

    def learn_endpoint(self, node_id: int, host: str, port: int) -> None:
        """Where node_id's controller listener is (a voter set's endpoint, or a leader's that a
        response names in its NodeEndpoints, KIP-853): requests to it go there from now on."""
        if node_id == self.node.id or not port or self.peers.get(node_id) == (host, port):
            return
        self.peers[node_id] = (host, port)
        if self._nursery is not None and node_id not in self._outgoing:
            send, recv = trio.open_memory_channel(1000)
            self._outgoing[node_id] = send
            self._nursery.start_soon(self._peer_loop, node_id, recv)

    def _node_endpoints(self, leader_id: int) -> list:
        """(node id, host, port) of the leader a response names, when this node knows where it is:
        KIP-853's NodeEndpoints, so that an observer reaches a leader it found through a
        bootstrap server."""
        if leader_id == self.node.id and self.own_endpoint is not None:
            return [(leader_id, *self.own_endpoint)]
        if leader_id >= 0 and leader_id in self.peers:
            return [(leader_id, *self.peers[leader_id])]
        return []

    def _request_fsync(self, sync_to):
        self._fsync_wanted = sync_to
        if not self._fsync_running:
            self._fsync_running = True
            self._nursery.start_soon(self._fsync_loop)

    async def _fsync_loop(self):
        # one fsync at a time; appends that arrive meanwhile share the next
        try:
            while self._fsync_wanted is not None:
                offset, gen = self._fsync_wanted
                self._fsync_wanted = None
                if getattr(self.storage, "fsync_in_thread", True):
                    await trio.to_thread.run_sync(self.storage.fsync)
                else:
                    self.storage.fsync()
                    await trio.sleep(0)
                self.node.durable(offset, gen)
                self._pump()
        finally:
            self._fsync_running = False

    def _dispatch(self, env: m.Envelope):
        if isinstance(env.msg, m.REQUESTS):
            chan = self._outgoing.get(env.dst)
            if chan is not None:
                try:
                    chan.send_nowait(env)
                except trio.WouldBlock:
                    pass  # lost, as on a slow network: the node retries
            return
        entry = self._inbound.pop(env.correlation_id, None)
        if entry is None:
            return
        chan, wire_corr, api_key, version = entry
        resp = convert.to_response(env.msg, timestamp_ms=0)
        if hasattr(resp, "node_endpoints"):
            ne = sys.modules[type(resp).__module__].NodeEndpoint   # (each response's own class)
            resp.node_endpoints = [ne(node_id=i, host=h, port=p)
                                   for i, h, p in self._node_endpoints(getattr(env.msg, "leader_id", -1))]
        out = bytearray(8)
        i32.pack_into(out, 4, wire_corr)
        if api.response_header_version(api_key, version) >= 1:
            out.append(0)
        resp.encode_into(out, version, None, strict=False)
        i32.pack_into(out, 0, len(out) - 4)
        try:
            chan.send_nowait(bytes(out))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    # ----------------------------------------------------------- outgoing

    async def _peer_loop(self, peer, recv):
        while True:
            host, port = self.peers[peer]   # (read again at each connect: a leader learned anew may move)
            try:
                if self.connect is not None:
                    stream = await self.connect(host, port, f"raft-{self.node.id}")
                else:
                    stream = await trio.open_tcp_stream(host, port)
            except _AUTH_ERRORS as exc:
                # a refused login or TLS handshake: said, and retried slowly (Kafka's reconnect backoff)
                log.error("raft connection to node %s at %s:%s: %s", peer, host, port, exc)
                await trio.sleep(1.0)
                continue
            except (OSError, EOFError, trio.BrokenResourceError) as exc:
                if isinstance(exc, OSError) and _refused(exc):
                    # nothing listens there: if it led, the node stands without the fetch timeout
                    self.node.peer_unreachable(peer)
                    self._pump()
                await trio.sleep(0.05)
                continue
            except Exception:   # a peer that answers nonsense costs this connection only
                log.exception("raft connection to node %s at %s:%s failed", peer, host, port)
                await trio.sleep(1.0)
                continue
            inflight = deque()
            try:
                async with stream, trio.open_nursery() as n:
                    n.start_soon(self._peer_reader, peer, stream, inflight)
                    async for env in recv:
                        if _expiring(stream):
                            # its SASL session ends soon: a new connection logs in again (this
                            # message and any unanswered ones are lost; the node retries them)
                            n.cancel_scope.cancel()
                            break
                        kreq = convert.to_request(env.msg, self.cluster_id, dst=peer)
                        if self.directory_id is not None and isinstance(env.msg, m.FetchRequest):
                            # (Fetch v17: the leader reports observers with their directory ids)
                            kreq.topics[0].partitions[0].replica_directory_id = self.directory_id
                        version = api.version_range(kreq.API_KEY)[1]
                        inflight.append((env, kreq.API_KEY, version))
                        await stream.send_all(api.encode_request(
                            kreq, version, env.correlation_id, client_id=f"raft-{self.node.id}"))
            except _CONN_ERRORS as exc:
                log.debug("connection to %s: %s", peer, exc)
            await trio.sleep(0.05)

    async def _peer_reader(self, peer, stream, inflight):
        buf = bytearray()
        while True:
            frame = await _read_frame(stream, buf)
            env, api_key, version = inflight.popleft()
            corr, kresp = api.decode_response(frame, api_key, version)
            if corr != env.correlation_id:
                raise ValueError(f"answer {corr} to request {env.correlation_id}")
            if getattr(kresp, "error_code", 0) == _CLUSTER_AUTHORIZATION_FAILED:
                # this node's principal lacks CLUSTER_ACTION there: said, then retried slowly
                log.error("node %s refused this node's raft request: CLUSTER_AUTHORIZATION_FAILED (this "
                          "node's principal needs CLUSTER_ACTION on the cluster: super.users or an ACL)", peer)
                await trio.sleep(1.0)
                raise ValueError("CLUSTER_AUTHORIZATION_FAILED")
            for ne in getattr(kresp, "node_endpoints", None) or ():
                self.learn_endpoint(ne.node_id, ne.host, ne.port)
            msg = convert.from_response(kresp, env.msg)
            self.node.step(m.Envelope(peer, self.node.id, corr, msg), self.now_ms())
            self._pump()

    # ----------------------------------------------------------- incoming

    async def _serve_conn(self, stream):
        conn = None
        if self.accept is not None:
            try:
                accepted = await self.accept(stream)
            except _CONN_ERRORS as exc:
                log.debug("inbound connection: %s", exc)
                accepted = None
            if accepted is None:
                with trio.CancelScope(shield=True):
                    try:
                        await stream.aclose()
                    except Exception:
                        pass
                return
            stream, conn = accepted
        send, recv = trio.open_memory_channel(1000)
        fetcher = None   # the replica id this connection fetches for, once seen

        async def writer():
            async for data in recv:
                await stream.send_all(data)

        buf = bytearray()
        try:
            async with stream, trio.open_nursery() as n:
                n.start_soon(writer)
                while True:
                    frame = await _read_frame(stream, buf)
                    if self.screen is not None and conn is not None:
                        try:
                            answer = await self.screen(conn, frame)
                        except Exception as exc:
                            if type(exc).__name__ != "CloseConnection":   # (broker/server/dispatch.py's)
                                raise
                            log.warning("closing connection from %s on the controller listener: %s",
                                        getattr(conn, "peer", None), exc)
                            if getattr(exc, "chunks", None):   # a failed login's answer goes first
                                await trio.sleep(exc.delay_s or 0)
                                send.send_nowait(b"".join(bytes(c) for c in exc.chunks))
                            send.close()   # the writer sends what is queued, then the connection ends
                            return
                        if answer is not None:
                            send.send_nowait(answer)
                            continue
                    header, kreq = api.decode_request(frame)
                    key = header.request_api_key
                    if key not in _RAFT_APIS and self.enabled_apis is not None and key not in self.enabled_apis():
                        log.warning("closing connection from %s on the controller listener: Received request "
                                    "api key %s with version %d which is not enabled", getattr(conn, "peer", None),
                                    key, header.request_api_version)
                        send.close()
                        return
                    if header.request_api_key in (ADD_RAFT_VOTER, REMOVE_RAFT_VOTER):
                        n.start_soon(self._answer_voter_change, send, header, kreq)
                        continue
                    if header.request_api_key not in _RAFT_APIS and self.other_requests is not None:
                        # Envelope, BrokerRegistration...: answered by the broker (broker/quorum/replicated.py)
                        n.start_soon(self._answer_other, send, header, kreq, frame, conn)
                        continue
                    if header.request_api_key not in _RAFT_APIS:
                        raise ValueError(f"API {header.request_api_key} on the quorum port")
                    msg = convert.from_request(kreq)
                    if isinstance(msg, m.FetchRequest):
                        if fetcher is None and msg.replica_id >= 0:
                            fetcher = msg.replica_id
                            self._fetch_links[fetcher] = self._fetch_links.get(fetcher, 0) + 1
                            self.fetch_links_closed.pop(fetcher, None)
                        directory = kreq.topics[0].partitions[0].replica_directory_id
                        if directory is not None and directory.int:
                            self.replica_directories[msg.replica_id] = directory
                    self._token += 1
                    self._inbound[self._token] = (send, header.correlation_id,
                                                  header.request_api_key,
                                                  header.request_api_version)
                    self.node.step(m.Envelope(_request_src(msg), self.node.id, self._token, msg),
                                   self.now_ms())
                    self._pump()
        except _CONN_ERRORS as exc:
            log.debug("inbound connection: %s", exc)
        finally:
            send.close()
            if fetcher is not None:
                left = self._fetch_links.get(fetcher, 1) - 1
                if left > 0:
                    self._fetch_links[fetcher] = left
                else:
                    self._fetch_links.pop(fetcher, None)
                    self.fetch_links_closed[fetcher] = self.now_ms()

    async def _answer_voter_change(self, send, header, kreq):
        """AddRaftVoter / RemoveRaftVoter (KIP-853), answered once the new voter set is committed
        (or refused with Kafka's error)."""
        from kproto.messages.add_raft_voter_response import AddRaftVoterResponse
        from kproto.messages.remove_raft_voter_response import RemoveRaftVoterResponse
        key = header.request_api_key
        error, message = await self.voter_change(key, kreq)
        cls = AddRaftVoterResponse if key == ADD_RAFT_VOTER else RemoveRaftVoterResponse
        resp = cls(error_code=error, error_message=message)
        out = bytearray(8)
        i32.pack_into(out, 4, header.correlation_id)
        out.append(0)   # flexible response header
        resp.encode_into(out, header.request_api_version, None, strict=False)
        i32.pack_into(out, 0, len(out) - 4)
        try:
            send.send_nowait(bytes(out))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def voter_change(self, key: int, kreq) -> tuple:
        """An AddRaftVoter / RemoveRaftVoter request's (error code, message), as Kafka's
        KafkaRaftClient checks and does it (the answer comes once the new voter set is committed).
        Also used by the broker listener's handler (broker/handlers/raft_voters.py)."""
        from broker.config.voters import request_refusal
        refused = request_refusal(key, kreq, self.cluster_id, self.listener_name, self.node.role == LEADER)
        if refused is not None:
            return refused
        directory = convert.uuid_to_text(kreq.voter_directory_id)
        endpoints = tuple((x.name, x.host, x.port) for x in kreq.listeners) if key == ADD_RAFT_VOTER else ()
        timeout_s = (kreq.timeout_ms if key == ADD_RAFT_VOTER and kreq.timeout_ms > 0 else 30000) / 1000
        try:
            with trio.fail_after(timeout_s):
                if key == ADD_RAFT_VOTER:
                    await self.add_voter(m.VoterInfo(kreq.voter_id, directory, endpoints))
                else:
                    await self.remove_voter(kreq.voter_id, directory)
        except VoterChangeError as exc:
            return exc.error, exc.message or None
        except trio.TooSlowError:
            return m.REQUEST_TIMED_OUT, None
        return 0, None

    async def add_voter(self, voter):
        """The leader adds a voter (raft.messages.VoterInfo); returns once the change is committed.
        Raises VoterChangeError with Kafka's refusal."""
        await self._voter_change(self.node.add_voter(voter))

    async def remove_voter(self, node_id: int, directory_id: str = ""):
        await self._voter_change(self.node.remove_voter(node_id, directory_id))

    async def _voter_change(self, p):
        if isinstance(p, m.VoterChangeRefused):
            raise VoterChangeError(p.error, p.message)
        if not await self._committed(p):
            raise VoterChangeError(m.NOT_LEADER_OR_FOLLOWER, "The leader changed before the new "
                                   "voter set was committed")

    async def _answer_other(self, send, header, kreq, frame, conn=None):
        try:
            chunks = await self.other_requests(header, kreq, frame, conn)
            send.send_nowait(b"".join(bytes(c) for c in chunks))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        except Exception:
            log.exception("request %d on the controller listener failed", header.request_api_key)

    # ------------------------------------------------------------- queries

    def describe_quorum_response(self):
        """DescribeQuorum's answer (kproto DescribeQuorumResponse), with the
        node's monotonic times turned into wall-clock milliseconds as Kafka
        reports them."""
        import time
        q = self.node.describe_quorum()
        shift = int(time.time() * 1000) - self.now_ms()
        for row in q["current_voters"] + q["observers"]:
            for key in ("last_fetch_timestamp", "last_caught_up_timestamp"):
                if row[key] >= 0:
                    row[key] += shift
        return convert.describe_quorum_response(q)

    # ----------------------------------------------------------- proposals

    async def propose(self, datas) -> int:
        """Append and wait until committed; returns the last offset. Raises
        NotLeaderError or ProposalLostError; callers bound it with a timeout
        (no majority: it waits)."""
        p = self.node.propose(datas)
        if isinstance(p, m.NotLeader):
            raise NotLeaderError(p.leader_id, p.leader_epoch)
        if not await self._committed(p):
            raise ProposalLostError(f"entries at {p.base_offset}-{p.last_offset}: leadership "
                                    f"lost before they were known committed")
        return p.last_offset

    async def _committed(self, p) -> bool:
        """Wait for the entries of an accepted append (p: its epoch and last offset) to be known
        committed: True, or False when the leadership was lost first (_fail_waiters)."""
        done = trio.Event()
        result = {}
        self._waiters.setdefault(p.last_offset, []).append((p.epoch, done, result))
        self._pump()
        await done.wait()
        return bool(result.get("ok"))

    def _fail_waiters(self):
        for waiters in self._waiters.values():
            for _, done, result in waiters:
                result["ok"] = False
                done.set()
        self._waiters.clear()

    def _resolve_waiters(self, hwm):
        for off in [o for o in self._waiters if o < hwm]:
            try:
                epoch = self.node.epoch_at(off)
            except IndexError:
                epoch = None  # already in a snapshot: it was committed as proposed
            for want, done, result in self._waiters.pop(off):
                result["ok"] = epoch is None or epoch == want
                done.set()
