"""`kproto --version` and the version in the ready line. (Kafka 3.9's
ApiVersions response has no field for the broker's version: the
client_software_* fields are the client's, in the request.)"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from broker.launch.version import VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_version_option():
    proc = subprocess.run([sys.executable, "-m", "broker.launch.cli", "--version"], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"kproto \d+\.\d+\.\d+\S* \(Kafka 3\.9 protocol\)\n", proc.stdout), proc.stdout
    assert VERSION in proc.stdout


def test_ready_line_names_the_version(broker):
    assert f"(kproto {VERSION}, node " in broker.ready_line, broker.ready_line
