"""One writer for the cluster's registry, elected as Confluent's registry
nodes elect theirs: every node joins the consumer group `schema-registry`
(protocol type "sr") with its URL as member metadata; the group leader's
assignment names the writer (the current one while it stays a member, else
the member with the lowest URL). A node that is not sure of its membership
(rebalancing, no heartbeat answered within the session timeout) does not
write: it forwards, or answers 50003 when no writer is known."""
from __future__ import annotations

import json
import logging

import trio

from kproto.errors import ErrorCode
from kproto.messages.find_coordinator_request import FindCoordinatorRequest
from kproto.messages.heartbeat_request import HeartbeatRequest
from kproto.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from kproto.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from kproto.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment

log = logging.getLogger("kproto.schema_registry")

PROTOCOL_TYPE = "sr"
PROTOCOL = "v0"


class WriterElection:
    def __init__(self, broker, settings):
        self.broker = broker
        self.group = settings.group_id
        self.session_ms = int(broker.config.static_configs.get("schema.registry.session.timeout.ms") or 10000)
        self.heartbeat_s = max(0.1, self.session_ms / 10000)   # a tenth of the session (Confluent: 3 s of 10)
        self.url = None            # this node's registry URL, set once bound
        self.member_id = ""
        self.generation = -1
        self.writer_url = None     # None: no writer known
        self._writer_is_me = False
        self._confirmed_at = 0.0   # last heartbeat answered
        self._coordinator = None
        self._conn = None

    def is_writer(self) -> bool:
        return self._writer_is_me and trio.current_time() - self._confirmed_at < self.session_ms / 1000

    async def wait_writer(self, timeout_s: float) -> str | None:
        with trio.move_on_after(timeout_s):
            while self.writer_url is None:
                await trio.sleep(0.05)
        return self.writer_url

    def _lose(self) -> None:
        self.writer_url, self._writer_is_me = None, False

    async def _request(self, msg, version):
        if self._conn is None:
            self._conn = await self._find_coordinator()
        try:
            return await self._conn.request(msg, version)
        except (OSError, EOFError, trio.BrokenResourceError):
            await self._drop()
            raise

    async def _drop(self) -> None:
        if self._conn is not None:
            await self._conn.aclose()
        self._conn = None

    async def _find_coordinator(self):
        topic = self.broker.schema_registry.topic
        local = topic._local()
        conn = self.broker.replication.connection(local[0], local[1], "kproto-schema-registry-election")
        try:
            while True:
                resp = await conn.request(FindCoordinatorRequest(key=self.group, key_type=0), 3)
                if resp.error_code == ErrorCode.NONE:
                    break
                await trio.sleep(0.2)
        finally:
            await conn.aclose()
        return self.broker.replication.connection(resp.host, resp.port, "kproto-schema-registry-election")

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self._join_and_hold()
                except (OSError, EOFError, trio.BrokenResourceError) as exc:
                    log.debug("schema registry election: %s", exc)
                    self._lose()
                    await self._drop()
                    await trio.sleep(0.2)
                except Exception:   # (a bug here costs this node its writer role, never the broker)
                    log.exception("schema registry election failed; joining again")
                    self._lose()
                    await self._drop()
                    await trio.sleep(1.0)
        finally:
            self._lose()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                if self.member_id and self._conn is not None:
                    try:
                        await self._conn.request(LeaveGroupRequest(group_id=self.group, members=[
                            MemberIdentity(member_id=self.member_id)]), 3)
                    except Exception:
                        pass
                await self._drop()

    async def _join_and_hold(self) -> None:
        metadata = json.dumps({"version": 1, "host": self.url, "scheme": self.url.split(":")[0],
                               "master_eligibility": True}).encode()
        join = JoinGroupRequest(group_id=self.group, session_timeout_ms=self.session_ms,
                                rebalance_timeout_ms=self.session_ms, member_id=self.member_id,
                                group_instance_id=None, protocol_type=PROTOCOL_TYPE,
                                protocols=[JoinGroupRequestProtocol(name=PROTOCOL, metadata=metadata)])
        resp = await self._request(join, 5)
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return
        if resp.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self.member_id = ""
            return
        if resp.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            await self._drop()
            await trio.sleep(0.2)
            return
        if resp.error_code != ErrorCode.NONE:
            await trio.sleep(0.2)
            return
        self.member_id, generation = resp.member_id, resp.generation_id
        assignments = []
        if resp.leader == self.member_id:
            urls = {m.member_id: json.loads(bytes(m.metadata)).get("host") for m in resp.members}
            current = next((m for m, u in urls.items() if u == self.writer_url), None)
            writer = current or min(urls, key=lambda m: (urls[m] or "", m))
            body = json.dumps({"version": 1, "error": 0, "master": writer,
                               "master_identity": {"host": urls[writer], "master_eligibility": True}}).encode()
            assignments = [SyncGroupRequestAssignment(member_id=m, assignment=body) for m in urls]
        sync = await self._request(SyncGroupRequest(group_id=self.group, generation_id=generation,
                                                    member_id=self.member_id, group_instance_id=None,
                                                    protocol_type=PROTOCOL_TYPE, protocol_name=PROTOCOL,
                                                    assignments=assignments), 5)
        if sync.error_code != ErrorCode.NONE or not sync.assignment:
            self._lose()
            return
        chosen = json.loads(bytes(sync.assignment))
        self.generation = generation
        self.writer_url = chosen["master_identity"]["host"]
        self._writer_is_me = chosen["master"] == self.member_id
        self._confirmed_at = trio.current_time()
        log.info("schema registry writer: %s%s (generation %d)", self.writer_url,
                 " (this node)" if self._writer_is_me else "", generation)
        while True:
            await trio.sleep(self.heartbeat_s)
            hb = await self._request(HeartbeatRequest(group_id=self.group, generation_id=generation,
                                                      member_id=self.member_id, group_instance_id=None), 4)
            if hb.error_code == ErrorCode.NONE:
                self._confirmed_at = trio.current_time()
                continue
            self._lose()
            if hb.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                self.member_id = ""
            elif hb.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                await self._drop()
            return
