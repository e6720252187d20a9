"""What the controller knows of each registered broker, for placement and
elections: its rack, whether it is fenced or in controlled shutdown, and
its registration epoch.

The metadata image gains broker registrations with the KRaft quorum; until a
node's image has them, a single node is its own (unfenced) broker."""
from __future__ import annotations

from typing import NamedTuple


# (a NamedTuple, not a frozen dataclass: the same immutable value, made at import in a fifth of
# the time, and every broker's controller imports it at start: issue 26)
class BrokerInfo(NamedTuple):
    """A registered broker as placement and election see it."""
    id: int
    rack: str | None = None
    fenced: bool = False
    in_controlled_shutdown: bool = False
    epoch: int = -1
    log_dirs: tuple = ()   # its online log dirs' ids (KIP-858); () when it registered none

    @property
    def acceptable_leader(self) -> bool:
        """Kafka's isAcceptableLeader: registered, unfenced, not shutting down."""
        return not self.fenced and not self.in_controlled_shutdown


def brokers_from_image(image, self_id: int, self_rack: str | None = None) -> dict[int, BrokerInfo]:
    """Broker id -> BrokerInfo from the image's registrations (any object with
    id / rack / fenced / in_controlled_shutdown / epoch attributes, as the
    quorum's image keeps them), else this node alone."""
    regs = getattr(image, "brokers", None)
    if not regs:
        return {self_id: BrokerInfo(self_id, self_rack)}
    out = {}
    for bid, reg in regs.items():
        out[bid] = BrokerInfo(
            bid, getattr(reg, "rack", None) or None, bool(getattr(reg, "fenced", False)),
            bool(getattr(reg, "in_controlled_shutdown", False)),
            int(getattr(reg, "epoch", getattr(reg, "broker_epoch", -1))),
            tuple(getattr(reg, "log_dirs", None) or ()))
    return out
