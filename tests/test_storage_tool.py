"""`kproto storage format | info | random-uuid`: kafka-storage.sh 3.9's options, output, refusals,
exit codes, and files byte-identical to Kafka's (tests/fixtures/kraft holds files Kafka wrote)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker.launch import cli
from broker.metadata import snapshots
from broker.storage.checkpoints import read_meta_properties, uuid_from_str
from kproto import records as rec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kraft"
CLUSTER = "K_iKt0NETNuvBO7rTe6QYg"


def properties(tmp_path, name="server.properties", **settings) -> str:
    base = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": "1@127.0.0.1:22093,2@127.0.0.1:22094,3@127.0.0.1:22095",
        "listeners": "PLAINTEXT://127.0.0.1:22092,CONTROLLER://127.0.0.1:22093",
        "advertised.listeners": "PLAINTEXT://127.0.0.1:22092",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(tmp_path / "data"),
    }
    for k, v in settings.items():
        k = k.replace("_", ".")
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    path = tmp_path / name
    path.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    return str(path)


def storage(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        cli.main(["storage", *args])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def batch_times(data: bytes) -> list[int]:
    return [h.base_timestamp for _pos, h in rec.iter_batch_headers(data)]


def test_format_writes_kafkas_files(tmp_path, capsys):
    config = properties(tmp_path)
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config)
    data = tmp_path / "data"
    assert (code, out, err) == (0, f"Formatting metadata directory {data} with metadata.version 3.9-IV0.\n", "")
    assert sorted(os.listdir(data)) == ["bootstrap.checkpoint", "meta.properties"]
    text = (data / "meta.properties").read_text()
    assert re.fullmatch(r"#\n#\w{3} \w{3} \d\d \d\d:\d\d:\d\d UTC \d{4}\nnode\.id=1\ndirectory\.id=[\w-]{22}\n"
                        r"version=1\ncluster\.id=K_iKt0NETNuvBO7rTe6QYg\n", text), text
    uuid_from_str(read_meta_properties(str(data / "meta.properties"))["directory.id"])
    # bootstrap.checkpoint: Kafka's bytes but for the clock readings in the three batches
    ours = (data / "bootstrap.checkpoint").read_bytes()
    kafka = (FIXTURES / "kafka-bootstrap.checkpoint").read_bytes()
    snap = snapshots.decode(ours)
    assert snapshots.bootstrap_bytes(snap.records, now_ms=tuple(batch_times(kafka))) == kafka
    assert len(ours) == len(kafka) and snapshots.decode(kafka).records == snap.records


def test_bootstrap_checkpoint_is_byte_identical_given_kafkas_clock():
    kafka = (FIXTURES / "kafka-bootstrap.checkpoint").read_bytes()
    from broker.quorum.formatter import bootstrap_records
    assert snapshots.bootstrap_bytes(bootstrap_records(21), now_ms=tuple(batch_times(kafka))) == kafka
    # the checker notices a difference
    assert snapshots.bootstrap_bytes(bootstrap_records(20), now_ms=tuple(batch_times(kafka))) != kafka


def test_long_options_and_release_version(tmp_path, capsys):
    config = properties(tmp_path)
    code, out, _ = storage(capsys, "format", "--cluster-id", CLUSTER, "--config", config,
                           "--release-version", "3.8")
    assert code == 0 and out.endswith("with metadata.version 3.8-IV0.\n")
    snap = snapshots.read(str(tmp_path / "data" / "bootstrap.checkpoint"))
    assert [(r.name, r.feature_level) for r in snap.records] == [("metadata.version", 20)]


def test_feature_transaction_version(tmp_path, capsys):
    config = properties(tmp_path)
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--feature", "transaction.version=3")
    assert (code, out, err) == (1, "", "Unsupported value 3 for transaction.version. Supported levels are 0-2.\n")
    code, _out, _err = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--feature", "transaction.version=2")
    assert code == 0
    snap = snapshots.read(str(tmp_path / "data" / "bootstrap.checkpoint"))
    assert [(r.name, r.feature_level) for r in snap.records] == [("metadata.version", 21),
                                                                  ("transaction.version", 2)]


def test_already_formatted_is_refused_then_ignored(tmp_path, capsys):
    config = properties(tmp_path)
    assert storage(capsys, "format", "-t", CLUSTER, "-c", config)[0] == 0
    before = (tmp_path / "data" / "meta.properties").read_bytes()
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config)
    assert (code, out, err) == (1, "", f"Log directory {tmp_path / 'data'} is already formatted. Use "
                                       "--ignore-formatted to ignore this directory and format the others.\n")
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--ignore-formatted")
    assert (code, out, err) == (0, "All of the log directories are already formatted.\n", "")
    assert (tmp_path / "data" / "meta.properties").read_bytes() == before


def test_another_cluster_id_or_node_id_is_refused(tmp_path, capsys):
    config = properties(tmp_path)
    storage(capsys, "format", "-t", CLUSTER, "-c", config)
    meta = tmp_path / "data" / "meta.properties"
    code, _out, err = storage(capsys, "format", "-t", "other", "-c", config, "-g")
    assert (code, err) == (1, f"Invalid cluster.id in: {meta}. Expected other, but read {CLUSTER}\n")
    config2 = properties(tmp_path, "node2.properties", node_id="2")
    code, _out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config2, "-g")
    assert code == 1 and err.startswith(f"Stored node id 1 doesn't match previous node id 2 in {meta}.")


def test_data_and_metadata_directories(tmp_path, capsys):
    config = properties(tmp_path, log_dirs=f"{tmp_path / 'b'},{tmp_path / 'a'}",
                        metadata_log_dir=str(tmp_path / "m"))
    code, out, _ = storage(capsys, "format", "-t", CLUSTER, "-c", config)
    assert code == 0
    assert out.splitlines() == [
        f"Formatting data directory {tmp_path / 'a'} with metadata.version 3.9-IV0.",
        f"Formatting data directory {tmp_path / 'b'} with metadata.version 3.9-IV0.",
        f"Formatting metadata directory {tmp_path / 'm'} with metadata.version 3.9-IV0."]
    ids = {read_meta_properties(str(tmp_path / d / "meta.properties"))["directory.id"] for d in "abm"}
    assert len(ids) == 3
    assert all((tmp_path / d / "bootstrap.checkpoint").exists() for d in "abm")


def test_legacy_config_is_refused(tmp_path, capsys):
    config = properties(tmp_path, process_roles=None, node_id=None, controller_quorum_voters=None,
                        controller_listener_names=None,
                        listeners="PLAINTEXT://127.0.0.1:22092", advertised_listeners=None,
                        listener_security_protocol_map=None, inter_broker_listener_name=None)
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config)
    assert (code, out) == (1, "")
    assert err == ("The kafka configuration file appears to be for a legacy cluster. Formatting is only "
                   "supported for clusters in KRaft mode.\n")


def test_dynamic_quorum_controller_needs_an_initial_quorum(tmp_path, capsys):
    config = properties(tmp_path, controller_quorum_voters=None,
                        controller_quorum_bootstrap_servers="127.0.0.1:22093")
    code, _out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config)
    assert (code, err) == (1, "Because controller.quorum.voters is not set on this controller, you must "
                              "specify one of the following: --standalone, --initial-controllers, or "
                              "--no-initial-controllers.\n")
    code, out, _ = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--no-initial-controllers")
    assert code == 0 and out.startswith("Formatting metadata directory")
    assert not (tmp_path / "data" / "__cluster_metadata-0").exists()


def test_standalone_writes_the_voters_snapshot(tmp_path, capsys):
    config = properties(tmp_path, controller_quorum_voters=None,
                        controller_quorum_bootstrap_servers="127.0.0.1:22093")
    code, out, _ = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--standalone")
    data = tmp_path / "data"
    assert (code, out) == (0, f"Formatting dynamic metadata voter directory {data} with metadata.version 3.9-IV0.\n")
    path = data / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    assert oct(path.stat().st_mode & 0o777) == "0o400"    # frozen read-only, as Kafka leaves it
    snap = snapshots.read(str(path))
    directory_id = read_meta_properties(str(data / "meta.properties"))["directory.id"]
    (voter,) = snap.voters.voters
    assert (voter.voter_id, voter.voter_directory_id, [(e.name, e.host, e.port) for e in voter.endpoints]) == (
        1, uuid_from_str(directory_id), [("CONTROLLER", "127.0.0.1", 22093)])
    assert snap.kraft_version == 1 and snap.records == []


def test_initial_controllers_snapshot_is_byte_identical_to_kafkas(tmp_path, capsys):
    config = properties(tmp_path, controller_quorum_voters=None,
                        controller_quorum_bootstrap_servers="127.0.0.1:9093",
                        listeners="PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093")
    code, _out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config,
                              "--initial-controllers", "1@127.0.0.1:9093:tbeE6Jgi0eWXhAQKQcfaBA")
    assert code == 0, err
    data = tmp_path / "data"
    kafka = (FIXTURES / "kafka-standalone-0-0.checkpoint").read_bytes()
    ours = (data / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint").read_bytes()
    k, o = snapshots.decode(kafka), snapshots.decode(ours)
    assert (o.voters, o.kraft_version, o.end_offset) == (k.voters, k.kraft_version, k.end_offset)
    times = batch_times(kafka)
    rebuilt = snapshots.encode([], last_contained_timestamp=k.header.last_contained_log_timestamp,
                               voters=o.voters, kraft_version=1, now_ms=(times[0], times[0], times[1]))
    assert rebuilt == kafka
    kafka_meta = read_meta_properties(str(FIXTURES / "kafka-standalone-meta.properties"))
    assert read_meta_properties(str(data / "meta.properties")) == kafka_meta
    assert list(read_meta_properties(str(data / "meta.properties"))) == list(kafka_meta)


@pytest.mark.parametrize("voters, message", [
    ("1@127.0.0.1:9093", "No colon following port could be found."),
    ("x@127.0.0.1:9093:tbeE6Jgi0eWXhAQKQcfaBA", "Failed to parse node id in dynamic voter string."),
    ("1127.0.0.1:9093:tbeE6Jgi0eWXhAQKQcfaBA", "No @ found in dynamic voter string."),
    ("1@127.0.0.1:9093:tbeE6Jgi0eWXhAQKQcfaBA,1@127.0.0.1:9094:tbeE6Jgi0eWXhAQKQcfaBA",
     "Node id 1 was specified more than once."),
])
def test_bad_initial_controllers(tmp_path, capsys, voters, message):
    config = properties(tmp_path, controller_quorum_voters=None,
                        controller_quorum_bootstrap_servers="127.0.0.1:22093")
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--initial-controllers", voters)
    assert (code, out, err) == (1, "", message + "\n")
    assert not (tmp_path / "data").exists()


def test_standalone_only_on_a_controller(tmp_path, capsys):
    config = properties(tmp_path, process_roles="broker", node_id="4",
                        listeners="PLAINTEXT://127.0.0.1:22092")
    code, _out, err = storage(capsys, "format", "-t", CLUSTER, "-c", config, "--standalone")
    assert (code, err) == (1, "You can only use --standalone on a controller.\n")


def test_standalone_and_initial_controllers_exclude_each_other(tmp_path, capsys):
    code, _out, err = storage(capsys, "format", "-t", CLUSTER, "-c", properties(tmp_path), "--standalone",
                              "--initial-controllers", "1@h:1:tbeE6Jgi0eWXhAQKQcfaBA")
    assert code == 1 and "not allowed with argument" in err


def test_missing_cluster_id_is_a_usage_error(tmp_path, capsys):
    code, _out, err = storage(capsys, "format", "-c", properties(tmp_path))
    assert code == 1 and "the following arguments are required: --cluster-id/-t" in err


def test_info_unformatted_then_formatted(tmp_path, capsys):
    config = properties(tmp_path)
    data = tmp_path / "data"
    code, out, _ = storage(capsys, "info", "-c", config)
    assert (code, out) == (1, f"Found problem:\n  {data} does not exist\n\n")
    data.mkdir()
    code, out, _ = storage(capsys, "info", "-c", config)
    assert (code, out) == (1, f"Found log directory:\n  {data}\n\nFound problem:\n  {data} is not formatted.\n\n")
    storage(capsys, "format", "-t", CLUSTER, "-c", config)
    directory_id = read_meta_properties(str(data / "meta.properties"))["directory.id"]
    code, out, _ = storage(capsys, "info", "-c", config)
    assert (code, out) == (0, f"Found log directory:\n  {data}\n\nFound metadata: {{cluster.id={CLUSTER}, "
                              f"directory.id={directory_id}, node.id=1, version=1}}\n\n")


def test_info_mismatched_directories(tmp_path, capsys):
    one = properties(tmp_path, "one.properties", log_dirs=str(tmp_path / "a"))
    two = properties(tmp_path, "two.properties", log_dirs=str(tmp_path / "b"))
    storage(capsys, "format", "-t", CLUSTER, "-c", one)
    storage(capsys, "format", "-t", "AAAAAAAAAAAAAAAAAAAAAQ", "-c", two)
    both = properties(tmp_path, "both.properties", log_dirs=f"{tmp_path / 'a'},{tmp_path / 'b'}")
    code, out, _ = storage(capsys, "info", "-c", both)
    assert code == 1 and out.endswith("Found problem:\n  Mismatched cluster IDs between storage directories.\n\n")


def test_random_uuid(capsys):
    ids = set()
    for _ in range(20):
        code, out, _ = storage(capsys, "random-uuid")
        assert code == 0 and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}\n", out)
        assert uuid_from_str(out.strip()).version == 4
        ids.add(out)
    assert len(ids) == 20


def test_command_line_exit_codes(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    config = properties(tmp_path)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", *args], capture_output=True,
                              text=True, env=env, timeout=60)
    first = run("format", "-t", CLUSTER, "-c", config)
    again = run("format", "-t", CLUSTER, "-c", config)
    assert (first.returncode, again.returncode) == (0, 1)
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1


KAFKA_HOME = os.environ.get("KAFKA_HOME")


@pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: compares with Kafka's kafka-storage.sh")
def test_same_as_kafka_storage_sh(tmp_path, capsys):
    """Both tools on the same configs: same output, exit codes and files."""
    tool = os.path.join(KAFKA_HOME, "bin", "kafka-storage.sh")

    def kafka(*args):
        p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout

    for kind, extra in [("static", {}), ("standalone", {"controller_quorum_voters": None,
                                                        "controller_quorum_bootstrap_servers": "127.0.0.1:22093"})]:
        ours_cfg = properties(tmp_path, f"ours-{kind}.properties", log_dirs=str(tmp_path / f"ours-{kind}"), **extra)
        kafka_cfg = properties(tmp_path, f"kafka-{kind}.properties", log_dirs=str(tmp_path / f"kafka-{kind}"),
                               **extra)
        flags = ["--standalone"] if kind == "standalone" else []
        code, out, _ = storage(capsys, "format", "-t", CLUSTER, "-c", ours_cfg, *flags)
        kcode, kout = kafka("format", "-t", CLUSTER, "-c", kafka_cfg, *flags)
        assert (code, out.replace("ours-", "kafka-")) == (kcode, kout)
        ours_dir, kafka_dir = tmp_path / f"ours-{kind}", tmp_path / f"kafka-{kind}"
        ours_files = sorted(str(p.relative_to(ours_dir)) for p in ours_dir.rglob("*"))
        assert ours_files == sorted(str(p.relative_to(kafka_dir)) for p in kafka_dir.rglob("*"))
        kb = (kafka_dir / "bootstrap.checkpoint").read_bytes()
        assert snapshots.bootstrap_bytes(snapshots.decode((ours_dir / "bootstrap.checkpoint").read_bytes()).records,
                                         now_ms=tuple(batch_times(kb))) == kb
        ours_meta = read_meta_properties(str(ours_dir / "meta.properties"))
        kafka_meta = read_meta_properties(str(kafka_dir / "meta.properties"))
        assert list(ours_meta) == list(kafka_meta) and ours_meta["cluster.id"] == kafka_meta["cluster.id"]
        # formatting again: both refuse; info: both the same but for the directory id
        code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", ours_cfg, *flags)
        assert (code, kafka("format", "-t", CLUSTER, "-c", kafka_cfg, *flags)[0]) == (1, 1)
        code, out, _ = storage(capsys, "info", "-c", ours_cfg)
        kcode, kout = kafka("info", "-c", kafka_cfg)
        scrub = lambda s: re.sub(r"directory\.id=[\w-]+", "directory.id=X", s.replace("ours-", "kafka-"))
        assert (code, scrub(out)) == (kcode, scrub(kout))


@pytest.mark.parametrize("release, message", [
    ("3.9-IV9", "Version 3.9-IV9 is not a valid version"),
    ("2.8", "metadata.version 2.8-IV1 is too old to be supported."),
    ("4.0-IV0", "metadata.version 4.0-IV0 is not yet stable."),
])
def test_release_version_refusals(tmp_path, capsys, release, message):
    # what kafka-storage.sh 3.9 prints for these (checked against it)
    code, out, err = storage(capsys, "format", "-t", CLUSTER, "-c", properties(tmp_path), "-r", release)
    assert (code, out, err) == (1, "", message + "\n")
    assert not (tmp_path / "data").exists()


def test_feature_flags_are_accepted_and_not_applied(tmp_path, capsys):
    # Kafka 3.9.0's StorageTool parses --feature but never applies it: same bootstrap either way
    code, out, _ = storage(capsys, "format", "-t", CLUSTER, "-c", properties(tmp_path), "-f", "group.version=1",
                           "--feature", "kraft.version=1")
    assert code == 0 and out.endswith("with metadata.version 3.9-IV0.\n")
    snap = snapshots.read(str(tmp_path / "data" / "bootstrap.checkpoint"))
    assert [(r.name, r.feature_level) for r in snap.records] == [("metadata.version", 21)]
