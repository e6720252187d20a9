"""The handler modules imported at their APIs' first request (broker/handlers DEFERRED, issue #26):
a broker that has not imported them advertises exactly the versions they serve, and their first
request is answered by them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from kproto.messages.api_versions_request import ApiVersionsRequest
from kproto.messages.describe_cluster_request import DescribeClusterRequest

from broker.handlers import ADVERTISED_WHEN, DEFERRED, FORWARDED, HANDLERS, load_all
from broker.launch.process import BrokerProcess
from broker.security import authz
from tests.wire_client import WireClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _served_by_every_module() -> dict:
    """ApiVersions' list when every handler module is imported (a fresh process: nothing deferred)."""
    code = ("import json; from broker.handlers import load_all; from broker.handlers.api_versions import advertised; "
            "load_all(); print(json.dumps({a.api_key: [a.min_version, a.max_version] for a in advertised()}))")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=60, check=True).stdout
    return {int(k): tuple(v) for k, v in json.loads(out).items()}


def test_a_fresh_broker_advertises_what_every_module_serves_and_answers_a_deferred_api(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data")).start(timeout=60)
    try:
        with WireClient(proc.bootstrap) as c:
            versions = c.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
            cluster = c.call(DescribeClusterRequest(), 0)   # (broker/handlers/cluster.py, deferred)
    finally:
        proc.stop()
    assert versions.error_code == 0
    assert {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys} == _served_by_every_module()
    assert cluster.error_code == 0 and [b.broker_id for b in cluster.brokers] == [1], cluster


def test_deferred_modules_register_only_the_handlers_listed():
    load_all()
    for module, keys in DEFERRED.items():
        registered = {k: (lo, hi) for k, (lo, hi, fn) in HANDLERS.items()
                      if getattr(fn, "__module__", None) == f"broker.handlers.{module}"}
        assert registered == {int(k): v for k, v in keys.items()}, module
        # what dispatch and ApiVersions consult before a module is imported must not come from it
        for table in (ADVERTISED_WHEN, authz.WRAPPERS):
            assert not [k for k, fn in table.items() if getattr(fn, "__module__", None) == f"broker.handlers.{module}"]
    assert {45, 46} <= FORWARDED   # (AlterPartitionReassignments, ListPartitionReassignments)
