"""Connections to the other brokers (peers.py) made at the first remote request: the transaction
coordinator's marker channel and its producers' verification only need them in a cluster, so a
single node neither imports them nor their request codecs (start-up CPU, issue #26)."""
from __future__ import annotations


class LazyPeers:
    broker = None
    peers_client_id = ""          # the client id of the connections (set by each class)
    _peer_conns = None

    @property
    def _peers(self):
        if self._peer_conns is None:
            from broker.transactions.peers import PeerConnections
            self._peer_conns = PeerConnections(self.broker, self.peers_client_id)
        return self._peer_conns

    async def aclose(self) -> None:
        if self._peer_conns is not None:
            await self._peer_conns.aclose()
