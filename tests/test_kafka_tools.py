"""Kafka's own tools read kproto's files: `kafka-dump-log.sh` decodes the
segments, indexes, producer snapshots and the metadata log a real
`kproto serve` wrote. Needs an Apache Kafka installation in KAFKA_HOME."""
from __future__ import annotations

import glob
import os
import subprocess

import pytest

from kproto import records as rec
from tests.wire_client import WireClient, create_topic, produce
from broker.launch.process import BrokerProcess

KAFKA_HOME = os.environ.get("KAFKA_HOME")
DUMP_LOG = os.path.join(KAFKA_HOME, "bin", "kafka-dump-log.sh") if KAFKA_HOME else None

pytestmark = [
    pytest.mark.skipif(not KAFKA_HOME, reason="KAFKA_HOME is not set: these tests run Kafka's "
                                              "bin/kafka-dump-log.sh from an Apache Kafka installation"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A stopped broker's data directory holding several segments of batches
    from librdkafka (every codec, headers, idempotent) and raw Produce."""
    from confluent_kafka import Producer
    b = BrokerProcess(str(tmp_path_factory.mktemp("kproto-dump")), settings={"log.segment.bytes": "65536"})
    b.start()
    try:
        topic = "dumped"
        create_topic(b.bootstrap, topic)
        for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
            p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec, "linger.ms": 5,
                          "enable.idempotence": True})
            for i in range(500):
                p.produce(topic, key=b"k%d" % i, value=b"%s-%d-" % (codec.encode(), i) + os.urandom(100),
                          headers=[("codec", codec.encode())])
            assert p.flush(30) == 0
        with WireClient(b.bootstrap) as c:
            r = produce(c, topic, rec.build_batch([(None, b"null key"), (b"k", None)]))
            assert r.error_code == 0
    finally:
        b.stop()
    return b.data_dir, topic


def dump(*args: str) -> str:
    proc = subprocess.run([DUMP_LOG, *args], capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Exception" not in out, out[-3000:]
    return proc.stdout


def test_dump_log_reads_every_segment(written):
    data_dir, topic = written
    logs = sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.log")))
    assert len(logs) > 2, "the fixture should have rolled several segments"
    for path in logs:
        out = dump("--files", path, "--print-data-log")
        with open(path, "rb") as f:
            data = f.read()
        headers = [h for _pos, h in rec.iter_batch_headers(data)]
        batch_lines = [ln for ln in out.splitlines() if ln.startswith("baseOffset:")]
        record_lines = [ln for ln in out.splitlines() if ln.startswith("| offset:")]
        assert len(batch_lines) == len(headers), out[-2000:]
        assert len(record_lines) == sum(h.record_count for h in headers)
        assert all("isvalid: true" in ln for ln in batch_lines), out[-2000:]
        assert all(f"baseOffset: {h.base_offset} " in ln for ln, h in zip(batch_lines, headers))


def test_dump_log_checks_indexes(written):
    data_dir, topic = written
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.index")) +
                       glob.glob(os.path.join(data_dir, f"{topic}-0", "*.timeindex"))):
        out = dump("--files", path, "--index-sanity-check")
        assert "Mismatches" not in out and "corrupt" not in out.lower(), out[-2000:]
        out = dump("--files", path)
        assert "Mismatches" not in out, out[-2000:]


def test_dump_log_reads_producer_snapshots(written):
    data_dir, topic = written
    snapshots = sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.snapshot")))
    assert snapshots, "rolls and the clean shutdown write producer snapshots"
    out = dump("--files", snapshots[-1])
    assert "producerId:" in out, out[-2000:]


def test_dump_log_decodes_the_metadata_log(written):
    data_dir, _topic = written
    for path in sorted(glob.glob(os.path.join(data_dir, "__cluster_metadata-0", "*.log"))):
        out = dump("--files", path, "--cluster-metadata-decoder")
        assert '"type":"TOPIC_RECORD"' in out.replace(" ", ""), out[-2000:]
