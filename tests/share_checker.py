"""A checker over a share group's delivery history (KIP-932 rules), for the share-partition
simulation and the real-client tests: feed it what consumers saw, then ask `problems()`.

Rules checked:
- a record is never delivered to a member while another member holds its acquisition lock
  (a delivery holds until it is acknowledged, released, or its lock deadline passes);
- delivery counts go 1, 2, 3, ... (or only up, across a broker kill) and never exceed the limit;
- nothing is delivered again after it was accepted or rejected;
- only the holder's acknowledgement takes effect;
- at the end every record is done: ACKNOWLEDGED if it was accepted, ARCHIVED if it was rejected or
  delivered `limit` times without an accept.
"""
from __future__ import annotations

ACKNOWLEDGED, ARCHIVED = 2, 4


class ShareHistoryChecker:
    def __init__(self, limit: int, gaps_allowed: bool = False):
        """gaps_allowed: a delivery may have been counted but never seen (a broker killed between
        acquiring records and answering): counts then only have to go up."""
        self.limit = limit
        self.gaps_allowed = gaps_allowed
        self.count: dict[int, int] = {}            # offset -> deliveries seen
        self.holder: dict[int, tuple] = {}         # offset -> (member, deadline) of the live delivery
        self.outcome: dict[int, str] = {}          # offset -> "accept" | "reject"
        self.errors: list[str] = []

    def deliver(self, t: int, member: str, offset: int, count: int, deadline: int) -> None:
        held = self.holder.get(offset)
        if held is not None and held[0] != member and t < held[1]:
            self.errors.append(f"offset {offset} delivered to {member} at {t} while {held[0]} held it until {held[1]}")
        if offset in self.outcome:
            self.errors.append(f"offset {offset} delivered again after {self.outcome[offset]}")
        expect = self.count.get(offset, 0) + 1
        if count != expect and not (self.gaps_allowed and count > expect):
            self.errors.append(f"offset {offset} delivery count {count}, expected {expect}")
        if count > self.limit:
            self.errors.append(f"offset {offset} delivered {count} times, limit {self.limit}")
        self.count[offset] = count
        self.holder[offset] = (member, deadline)

    def ack(self, t: int, member: str, offset: int, kind: str) -> None:
        """A successful acknowledgement: kind accept / reject / release / renew."""
        held = self.holder.get(offset)
        if held is None or held[0] != member or t >= held[1]:
            self.errors.append(f"offset {offset}: {member}'s {kind} at {t} took effect without holding the lock ({held})")
        if kind == "renew":
            return
        self.holder.pop(offset, None)
        if kind in ("accept", "reject"):
            self.outcome[offset] = kind

    def freed(self, offset: int) -> None:
        """The lock ended without an acknowledgement (expiry, the member left)."""
        self.holder.pop(offset, None)

    def final(self, offsets, state_of) -> None:
        """Every offset in `offsets` is done, and done the right way; `state_of(offset)` -> its state,
        or None when it is below the share-partition start offset (done; which way is not kept)."""
        for off in offsets:
            state = state_of(off)
            kind = self.outcome.get(off)
            if kind == "accept":
                want = ACKNOWLEDGED
            elif kind == "reject" or self.count.get(off, 0) >= self.limit:
                want = ARCHIVED
            else:
                self.errors.append(f"offset {off} never accepted nor archived ({self.count.get(off, 0)} deliveries)")
                continue
            if state is not None and state != want:
                self.errors.append(f"offset {off} ends in state {state}, expected {want}")

    def problems(self) -> list[str]:
        return self.errors
