"""A single node loads only what it is configured to run (issue #26: start-up CPU is almost all
imports). `kproto serve` under PYTHONPROFILEIMPORTTIME lists every module it imported on stderr;
a plain single node (no quorum of several voters, metrics listener off, no schema registry,
no tiered storage, no share groups) must not have loaded the raft state machine, the replicated
quorum, prometheus_client, the schema registry, tiered storage's record codecs, planner and object
stores, the share-group service, or the crc32c package's importlib.metadata, nor replication's follower side
(no partition with followers) or the remote log manager. The configured cases load them:
tests/test_describe_quorum.py (a dynamic quorum), tests/test_metrics.py,
tests/test_schema_registry_api.py, tests/test_tiered_storage.py, tests/test_share_groups.py,
tests/test_replication_processes.py (followers fetching from their leader)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from broker.launch.process import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_LOADED = ("raft.node", "raft.messages", "broker.quorum.replicated", "prometheus_client",
              "broker.schema_registry", "broker.tiered.metadata_records", "broker.tiered.planner",
              # the share-group service, built at the first share request (Broker.share)
              "broker.share.service", "broker.share.coordinator_shell", "broker.share.state_store",
              # tiered storage's object stores and remote reader (a broker that tiers opens them)
              "broker.tiered.object_store", "broker.tiered.remote_read",
              # the crc32c package's __init__ and the importlib.metadata it loads for its version
              # (kproto/crc.py loads its C extension directly)
              "crc32c", "importlib.metadata",
              # the transaction coordinator's connections to other brokers (markers, verification)
              "broker.transactions.peers", "kproto.messages.write_txn_markers_request",
              "kproto.messages.add_partitions_to_txn_request",
              # client telemetry's manager and codecs (no client-metrics subscription, no request)
              "broker.metrics.client_metrics", "kproto.messages.push_telemetry_response",
              # KIP-848 consumer groups' and share groups' __consumer_offsets records (types 3-8, 10-15),
              # the consumer-group APIs' codecs and the classic-member/assignor code of a consumer
              # group: imported at the first such record written or replayed, or the first request
              # (tests/test_consumer_groups_kip848.py, tests/test_share_groups.py restart a broker with them)
              "kproto.coordinator.consumer_group_metadata_key", "kproto.coordinator.consumer_group_metadata_value",
              "kproto.coordinator.consumer_group_member_metadata_value",
              "kproto.coordinator.consumer_group_current_member_assignment_value",
              "kproto.coordinator.share_group_metadata_key", "kproto.coordinator.share_group_member_metadata_value",
              "kproto.coordinator.share_group_state_partition_metadata_value",
              # (broker.handlers.consumer_groups itself is imported by importlib, which -X importtime
              # does not list: its codecs below stand for it)
              "kproto.messages.consumer_group_heartbeat_response",
              "kproto.messages.consumer_group_describe_response", "broker.groups.assignors",
              "broker.groups.consumer_results", "broker.groups.share_metadata", "broker.groups.share_records",
              "kproto.messages.consumer_protocol_subscription",
              # security a PLAINTEXT listener without authorizer.class.name, SASL or client quotas
              # never runs: the ACL checks, the SASL gate, exchange and codecs, the quota
              # accounting, delegation-token logins, TLS contexts and JAAS parsing (the configured
              # cases: tests/test_security_*.py)
              "broker.security.authz", "broker.security.acls", "broker.security.gate",
              "broker.security.authenticate", "broker.security.sasl", "broker.security.tokens",
              "broker.security.mutations", "broker.security.throttle", "broker.security.tls",
              "broker.security.jaas", "kproto.messages.sasl_handshake_request",
              "kproto.messages.sasl_handshake_response", "kproto.messages.sasl_authenticate_request",
              "kproto.messages.sasl_authenticate_response",
              # the metadata snapshot's client-quota and SCRAM records (none to write)
              "kproto.metadata.client_quota_record", "kproto.metadata.user_scram_credential_record",
              # replication's follower side and ISR changes (a partition with followers, a peer to
              # fetch from), the remote log manager (remote.log.storage.system.enable), and the
              # AssignReplicasToDirs answer (a multi-voter quorum's controller)
              "broker.replication.fetcher", "broker.replication.client",
              "broker.replication.fetch_session_handler", "broker.replication.leader_state",
              "broker.replication.alter_partition", "kproto.messages.alter_partition_request",
              "kproto.messages.alter_partition_response", "broker.tiered.manager",
              "broker.tiered.segment_view", "broker.tiered.store_types", "broker.tiered.backoff",
              "broker.tiered.lineage", "broker.tiered.keys", "broker.tiered.remote_records",
              "kproto.messages.assign_replicas_to_dirs_response",
              # the transaction state machine, its model, records and marker channel: built at the
              # first transactional request or __transaction_state to load (TransactionCoordinator.state)
              "broker.transactions.state", "broker.transactions.model", "broker.transactions.records",
              "broker.transactions.markers", "kproto.coordinator.transaction_log_key",
              "kproto.coordinator.transaction_log_value",
              # this node's SASL/TLS client for its peers, built at first use when the peer listeners
              # are PLAINTEXT (SecurityManager._peer_clients)
              "broker.security.outbound", "broker.net.framing")


def test_a_single_node_imports_no_quorum_metrics_registry_or_tiering(tmp_path):
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "broker.launch.cli", "serve", "--set", f"log.dirs={tmp_path / 'data'}",
           "--set", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--set", "kproto.metrics.listener=off"]
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=ROOT)
        try:
            ready = proc.stdout.readline()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert ready.startswith("kproto ready"), (tmp_path / "stderr").read_text()[-2000:]
    loaded = {line.rsplit("|", 1)[1].strip() for line in (tmp_path / "stderr").read_text().splitlines()
              if line.startswith("import time:")}
    assert "broker.broker" in loaded   # (the listing is there)
    assert [m for m in NOT_LOADED if m in loaded] == []
