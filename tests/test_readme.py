"""The README's confluent-kafka example, run as written against a broker
whose `demo` topic already holds another record (as after the kcat
example): it prints the record it produced."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python_example() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_confluent_example_prints_what_it_produced(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    code = _python_example()
    assert "127.0.0.1:9092" in code
    code = code.replace("127.0.0.1:9092", broker.bootstrap)
    # what the kcat example leaves: an earlier record at offset 0
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("demo", key="k1", value="hello")
    p.flush(10)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "b'k' b'v'\n"
