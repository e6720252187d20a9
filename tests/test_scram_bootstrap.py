"""`kproto storage format --add-scram` (Kafka's KIP-900 option): the credential lands in
bootstrap.checkpoint as a UserScramCredentialRecord whose keys verify the password (the cluster test
tests/test_security_cluster.py replicates with it); bad entries are refused with Kafka's wording."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.metadata import snapshots
from broker.quorum.scram_bootstrap import ScramFormatError, parse
from broker.security import sasl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_format_writes_the_credential(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                     f"listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
                     f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / 'd'}\n")
    out = subprocess.run([sys.executable, "-m", "broker.launch.cli", "storage", "format", "-t", "q1Sh-9_ISia_zwGINzRvyQ",
                          "-c", str(props), "--add-scram", "SCRAM-SHA-512=[name=broker,password=\"pw,1\",iterations=8192]"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    records = snapshots.read(str(tmp_path / "d" / snapshots.BOOTSTRAP_FILE)).records
    cred = [r for r in records if type(r).__name__ == "UserScramCredentialRecord"]
    assert len(cred) == 1 and cred[0].name == "broker" and cred[0].mechanism == 2 and cred[0].iterations == 8192
    salted = sasl.salted_password("pw,1", cred[0].salt, 8192, "sha512")
    assert sasl.scram_keys(salted, "sha512") == (cred[0].stored_key, cred[0].server_key)
    assert sasl.scram_keys(sasl.salted_password("pw", cred[0].salt, 8192, "sha512"), "sha512")[0] != cred[0].stored_key


@pytest.mark.parametrize("entry,message", [
    ("SCRAM-SHA-256=[password=x]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-256=[name=a]", "You must supply one of 'password' or 'saltedpassword'"),
    ("SCRAM-SHA-256=[name=a,password=x,iterations=100]", "'iterations' value must be >= 4096"),
    ("SCRAM-SHA-1=[name=a,password=x]", "Invalid SCRAM credential")])
def test_bad_entries_are_refused(entry, message):
    with pytest.raises(ScramFormatError, match=message):
        parse(entry)
