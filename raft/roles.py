"""A raft node's roles, by name. A module of their own so that code which only names a role
(the raft-metrics of broker/metadata/raft_metrics.py) does not load the state machine and its
messages: a single node never runs raft."""
from __future__ import annotations

UNATTACHED = "unattached"   # knows the epoch, no leader; may have voted
CANDIDATE = "candidate"
PROSPECTIVE = "prospective"  # pre-vote (KIP-996): asks before bumping the epoch
LEADER = "leader"
FOLLOWER = "follower"
RESIGNED = "resigned"       # was leader of this epoch; waits for the next
