"""The web console at /console on the metrics HTTP listener (`kproto.metrics.listener`): cluster
overview, topics, a message browser, consumer groups with lag, throughput and lag charts. It reads
the cluster as a Kafka client of the broker's own listener (broker/admin), so with an authorizer
each page shows what the logged-in user's ACLs allow (HTTP basic, checked as a SCRAM login).
Read-only unless `kproto.console.writes.enable=true` (actions.py); `kproto.console.enable=false`
turns it off; docs/console.md is the user's guide.

app.py       routing, login, the page handlers
views.py     the data each page shows, paginated and filtered on the server
charts.py    SVG line charts (pygal) and the sampled history behind them
actions.py   the changes a form may make: create or delete a topic, reset a group's offsets
templates/   Jinja2 templates
"""
from __future__ import annotations

from broker.console.app import ENABLE_KEY, Console

__all__ = ["Console", "ENABLE_KEY"]
