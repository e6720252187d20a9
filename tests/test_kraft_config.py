"""KRaft settings: Kafka 3.9's keys, defaults and start-up refusals (KafkaConfig.validateValues),
with Kafka's wording; a user's mistake stops `kproto serve` with one line and exit code 1."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.config.kraft import ZOOKEEPER_REFUSAL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# node 1 of the observed three-node combined cluster (kafka-observations/cluster/setup-node1.properties)
COMBINED = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095",
    "listeners": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
    "advertised.listeners": "PLAINTEXT://127.0.0.1:19092",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "log.dirs": "/tmp/kproto-kraft-test",
}
BROKER_ONLY = {
    "process.roles": "broker",
    "node.id": "4",
    "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095",
    "listeners": "PLAINTEXT://127.0.0.1:19096",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "log.dirs": "/tmp/kproto-kraft-test",
}
CONTROLLER_ONLY = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.quorum.voters": "1@127.0.0.1:19093,2@127.0.0.1:19094,3@127.0.0.1:19095",
    "listeners": "CONTROLLER://127.0.0.1:19093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "/tmp/kproto-kraft-test",
}


def load(base, **changes):
    props = dict(base)
    for k, v in changes.items():
        k = k.replace("_", ".")
        if v is None:
            props.pop(k, None)
        else:
            props[k] = v
    return BrokerConfig.load(overrides=props, embedded_defaults=False)


def test_kafka_defaults_of_the_quorum_keys():
    c = BrokerConfig.load(embedded_defaults=False)
    assert c.kraft is None          # no process.roles: Kafka would run in ZooKeeper mode
    expected = {
        "controller.quorum.election.timeout.ms": 1000, "controller.quorum.fetch.timeout.ms": 2000,
        "controller.quorum.election.backoff.max.ms": 1000, "controller.quorum.request.timeout.ms": 2000,
        "controller.quorum.retry.backoff.ms": 20, "controller.quorum.append.linger.ms": 25,
        "metadata.log.max.record.bytes.between.snapshots": 20971520,
        "metadata.log.max.snapshot.interval.ms": 3600000, "metadata.max.idle.interval.ms": 500,
        "metadata.log.dir": None, "controller.quorum.voters": [], "controller.quorum.bootstrap.servers": [],
        "process.roles": [], "node.id": -1, "controller.listener.names": None,
    }
    assert {k: c.get(k) for k in expected} == expected


def test_combined_node_settings():
    k = load(COMBINED, metadata_log_dir="/tmp/meta", controller_quorum_election_timeout_ms="1500").kraft
    assert k.is_broker and k.is_controller and not k.single_node_quorum
    assert k.voters == {1: ("127.0.0.1", 19093), 2: ("127.0.0.1", 19094), 3: ("127.0.0.1", 19095)}
    assert [str(e) for e in k.controller_endpoints] == ["CONTROLLER://127.0.0.1:19093"]
    assert (k.metadata_log_dir, k.election_timeout_ms, k.fetch_timeout_ms) == ("/tmp/meta", 1500, 2000)
    assert load(COMBINED).kraft.metadata_log_dir == "/tmp/kproto-kraft-test"   # first log dir


def test_broker_and_controller_only_nodes_are_accepted():
    b = load(BROKER_ONLY).kraft
    assert b.is_broker and not b.is_controller and b.controller_endpoints == []
    c = load(CONTROLLER_ONLY).kraft
    assert c.is_controller and not c.is_broker
    # dynamic quorum (KIP-853): bootstrap servers instead of voters
    d = load(CONTROLLER_ONLY, controller_quorum_voters=None,
             controller_quorum_bootstrap_servers="127.0.0.1:19093").kraft
    assert d.voters == {} and d.bootstrap_servers == ["127.0.0.1:19093"]


def test_embedded_default_is_a_single_node_quorum():
    k = BrokerConfig.load().kraft
    assert k.single_node_quorum and list(k.voters) == [1] and not k.controller_endpoints
    # client listeners only: the embedded quorum is kept, with no controller listener (nothing
    # would connect to a one-voter quorum, so none is reported either)
    c = BrokerConfig.load(overrides=["listeners=PLAINTEXT://127.0.0.1:19092"])
    assert c.get("listeners") == "PLAINTEXT://127.0.0.1:19092"
    assert c.kraft.single_node_quorum
    assert [str(e) for e in c.broker_listeners] == ["PLAINTEXT://127.0.0.1:19092"]


R = "requirement failed: "
REFUSALS = [
    (COMBINED, {"broker.id": "2"}, "You must set `node.id` to the same value as `broker.id`."),
    (COMBINED, {"node.id": None}, "Missing configuration `node.id` which is required when "
                                  "`process.roles` is defined (i.e. when running in KRaft mode)."),
    (COMBINED, {"process.roles": "broker,broker"},
     "Duplicate role names found in `process.roles`: ArrayBuffer(broker, broker)"),
    (COMBINED, {"process.roles": "broker,zookeeper"},
     "Invalid value zookeeper for configuration process.roles: String must be one of: broker, controller"),
    (COMBINED, {"controller.quorum.voters": None},
     "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of bootstrap "
     "controllers or controller.quorum.voters must contain a parseable set of controllers."),
    (COMBINED, {"control.plane.listener.name": "PLAINTEXT"},
     R + "control.plane.listener.name is not supported in KRaft mode."),
    (COMBINED, {"node.id": "7"}, R + "If process.roles contains the 'controller' role, the node id 7 must "
                                 "be included in the set of voters controller.quorum.voters=Set(1, 2, 3)"),
    (COMBINED, {"controller.listener.names": "CTRL", "listener.security.protocol.map":
                "CTRL:PLAINTEXT,CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"},
     R + "controller.listener.names must contain at least one value appearing in the 'listeners' "
         "configuration when running the KRaft controller role"),
    (COMBINED, {"controller.listener.names": "CONTROLLER,CTRL", "listener.security.protocol.map":
                "CTRL:PLAINTEXT,CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"},
     R + "controller.listener.names must only contain values appearing in the 'listeners' configuration "
         "when running the KRaft controller role"),
    (COMBINED, {"listeners": "CONTROLLER://127.0.0.1:19093", "advertised.listeners": None},
     R + "There must be at least one broker advertised listener. Perhaps all listeners appear in "
         "controller.listener.names?"),
    (COMBINED, {"inter.broker.listener.name": "INTERNAL", "listener.security.protocol.map":
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"},
     R + "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
         "options based on currently configured listeners are PLAINTEXT"),
    (COMBINED, {"inter.broker.listener.name": "INTERNAL"},
     "Listener with name INTERNAL defined in inter.broker.listener.name not found in "
     "listener.security.protocol.map."),
    (COMBINED, {"security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    (COMBINED, {"advertised.listeners": "PLAINTEXT://127.0.0.1:19092,EXTRA://127.0.0.1:19099",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,EXTRA:PLAINTEXT"},
     R + "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
         "Found PLAINTEXT,EXTRA. The valid options based on the current configuration are PLAINTEXT,CONTROLLER"),
    (BROKER_ONLY, {"node.id": "2"}, R + "If process.roles contains just the 'broker' role, the node id 2 "
                                    "must not be included in the set of voters controller.quorum.voters=Set(1, 2, 3)"),
    (BROKER_ONLY, {"controller.listener.names": None},
     R + "controller.listener.names must contain at least one value when running KRaft with just the broker role"),
    (BROKER_ONLY, {"listeners": "PLAINTEXT://127.0.0.1:19096,CONTROLLER://127.0.0.1:19097"},
     R + "controller.listener.names must not contain a value appearing in the 'listeners' configuration "
         "when running KRaft with just the broker role"),
    (BROKER_ONLY, {"controller.listener.names": "SSL_CTRL"},
     "Controller listener with name SSL_CTRL defined in controller.listener.names not found in "
     "listener.security.protocol.map  (an explicit security mapping for each controller listener is "
     "required if listener.security.protocol.map is non-empty, or if there are security protocols "
     "other than PLAINTEXT in use)"),
    (CONTROLLER_ONLY, {"listeners": "CONTROLLER://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19092"},
     R + "The listeners config must only contain KRaft controller listeners from controller.listener.names "
         "when process.roles=controller"),
    (CONTROLLER_ONLY, {"controller.quorum.voters": "1@127.0.0.1"},
     "Failed to parse host name from entry 1@127.0.0.1 for the configuration controller.quorum.voters. "
     "Each entry should be in the form `{id}@{host}:{port}`."),
]


@pytest.mark.parametrize("base, changes, message", REFUSALS,
                         ids=[f"{i}-{m[len(R):][:40] if m.startswith(R) else m[:40]}"
                              for i, (_b, _c, m) in enumerate(REFUSALS)])
def test_kafka_refusals(base, changes, message):
    props = dict(base)
    for k, v in changes.items():
        if v is None:
            props.pop(k, None)
        else:
            props[k] = v
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(overrides=props, embedded_defaults=False)
    assert e.value.message == message


def test_setting_process_roles_alone_keeps_the_embedded_quorum():
    # documented in docs/operations.md: a role set by hand leaves kproto's embedded single-node
    # quorum (which has no voters nor controller listener to reuse), so the node must name its
    # quorum as Kafka requires, and is refused with Kafka's message until it does
    for roles in ("broker", "controller"):
        with pytest.raises(ConfigError, match=re.escape("either controller.quorum.bootstrap.servers must")):
            BrokerConfig.load(overrides=[f"process.roles={roles}"])


def run_cli(*args, timeout=30):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "broker.launch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_serve_refuses_a_bad_quorum_config_with_one_line(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {**COMBINED, "node.id": "7",
                                                        "log.dirs": str(tmp_path / "data")}.items()))
    p = run_cli("serve", "--config", str(props))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "kproto: requirement failed: If process.roles contains the 'controller' role, the node id 7 must be "
        "included in the set of voters controller.quorum.voters=Set(1, 2, 3)"]
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_serve_refuses_a_config_without_roles(tmp_path):
    p = run_cli("serve", "--set", "process.roles=", "--set", f"log.dirs={tmp_path}")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [f"kproto: {ZOOKEEPER_REFUSAL}"]


def test_unformatted_multi_voter_node_refuses_to_start(tmp_path):
    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {**COMBINED, "log.dirs": str(data)}.items()))
    p = run_cli("serve", "--config", str(props))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        "kproto: No readable meta.properties files found. Format the log directories first: "
        "kproto storage format -t <cluster id> -c <server.properties>"]
    assert not data.exists()
    # one of two directories formatted: Kafka's message naming the other one
    meta = tmp_path / "meta"
    props2 = tmp_path / "two.properties"
    props2.write_text(props.read_text() + f"metadata.log.dir={meta}\n")
    assert run_cli("storage", "format", "-t", "K_iKt0NETNuvBO7rTe6QYg", "-c", str(props2)).returncode == 0
    import shutil
    shutil.rmtree(data)
    p = run_cli("serve", "--config", str(props2))
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        f"kproto: No `meta.properties` found in {data} (have you run `kproto storage format` to format "
        "the directory?)"]
    # once formatted, the configuration is accepted (formatting is what was missing)
    f = run_cli("storage", "format", "-t", "K_iKt0NETNuvBO7rTe6QYg", "-c", str(props))
    assert f.returncode == 0, f.stderr
    from broker.quorum.startup import prepare_storage
    assert prepare_storage(BrokerConfig.load(props, embedded_defaults=False)) == "K_iKt0NETNuvBO7rTe6QYg"


def test_formatted_for_another_node_refuses_to_start(tmp_path):
    data = tmp_path / "data"
    props = tmp_path / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {**COMBINED, "log.dirs": str(data)}.items()))
    assert run_cli("storage", "format", "-t", "K_iKt0NETNuvBO7rTe6QYg", "-c", str(props)).returncode == 0
    p = run_cli("serve", "--config", str(props), "--set", "node.id=2")
    assert p.returncode == 1
    assert p.stderr.startswith(f"kproto: Stored node id 1 doesn't match previous node id 2 in {data}/meta.properties.")
    assert len(p.stderr.strip().splitlines()) == 1


def test_single_node_formats_itself_on_first_start(tmp_path):
    from broker.metadata import snapshots
    from broker.quorum.startup import prepare_storage
    from broker.storage.checkpoints import read_meta_properties
    c = BrokerConfig.load(overrides=[f"log.dirs={tmp_path / 'data'}", "listeners=PLAINTEXT://127.0.0.1:0"])
    cluster = prepare_storage(c)
    meta = read_meta_properties(str(tmp_path / "data" / "meta.properties"))
    assert (meta["cluster.id"], meta["node.id"], meta["version"]) == (cluster, "1", "1")
    assert snapshots.read(str(tmp_path / "data" / "bootstrap.checkpoint")).records[0].feature_level == 21
    assert prepare_storage(c) == cluster     # the second start keeps the cluster


def test_serve_with_a_missing_config_file(tmp_path):
    p = run_cli("serve", "--config", str(tmp_path / "nope.properties"))
    assert p.returncode == 1
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("kproto: ") and str(tmp_path / "nope.properties") in line
