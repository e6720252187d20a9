"""The fetcher's side of an incremental fetch session (KIP-227), as Kafka's
FetchSessionHandler (clients/.../FetchSessionHandler.java) keeps it for a
follower's replica fetcher: the first fetch is full and asks for a session;
once the leader answers with a session id, each fetch lists only the
partitions added or changed since the last one (fetch offset, log start,
leader epochs, max bytes) and those to forget, and the leader answers only
partitions with news. A session error (or a lost connection) makes the next
fetch full again: FETCH_SESSION_ID_NOT_FOUND asks for a new session from
scratch, any other error closes the old one and asks for a new one."""
from __future__ import annotations

from broker.partitions.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kproto.errors import ErrorCode


def _params(fp) -> tuple:
    return (fp.fetch_offset, fp.log_start_offset, fp.partition_max_bytes, fp.current_leader_epoch,
            fp.last_fetched_epoch)


class FetchSessionHandler:
    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict = {}   # key -> the request partition last sent (what the leader caches)

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def build(self, wanted: dict) -> tuple[list, list]:
        """(partitions to send as [(key, request partition)], keys to forget)
        for the partitions wanted now (key -> request partition, in order).
        A full fetch sends them all; an incremental one the new partitions,
        then the changed ones, and forgets those no longer wanted."""
        if self.full:
            self.partitions = dict(wanted)
            return list(wanted.items()), []
        added, altered, forget = [], [], []
        session = self.partitions
        for key in list(session):
            fp = wanted.get(key)
            if fp is None:
                del session[key]
                forget.append(key)
            elif fp is not session[key] and _params(fp) != _params(session[key]):
                session[key] = fp
                altered.append((key, fp))
        for key, fp in wanted.items():
            if key not in session:
                session[key] = fp
                added.append((key, fp))
        return added + altered, forget

    def build_changed(self, changed: dict) -> list:
        """The partitions to send in an incremental fetch, from only those that may have
        changed since the last one (key -> request partition; the others are as sent). No
        forgetting here: a partition no longer wanted goes through build()."""
        session = self.partitions
        out = []
        for key, fp in changed.items():
            old = session.get(key)
            if old is None or (fp is not old and _params(fp) != _params(old)):
                session[key] = fp
                out.append((key, fp))
        return out

    def handle_response(self, resp) -> bool:
        """Move the session on after an answer; False if the answer is a
        session error (its partitions, none, are not to be used)."""
        if resp.error_code:
            if resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if self.full:
            self.session_id = resp.session_id
            self.epoch = next_epoch(INITIAL_EPOCH) if resp.session_id != INVALID_SESSION_ID else INITIAL_EPOCH
        elif resp.session_id == INVALID_SESSION_ID:
            self.epoch = INITIAL_EPOCH   # the leader closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """No answer (connection lost, timeout): the next fetch is full, closing the old session."""
        self.epoch = INITIAL_EPOCH
