"""Tiered storage end to end on S3: a `kproto serve` process copies a topic's closed segments to a
real S3-compatible server (moto's standalone server, over HTTP) and a consumer reads the topic
from offset 0 after the local segments are gone; deleting the topic empties its folder of the
bucket."""
from __future__ import annotations


import pytest
from confluent_kafka.admin import AdminClient

from broker.launch.process import BrokerProcess
from tests.test_tiered_storage import consume_all, create, offsets, produce, tiered_settings, wait_for
from tools.s3_server import BUCKET, MotoServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def s3_broker(tmp_path_factory):
    moto = MotoServer().start()
    settings = tiered_settings("unused")
    del settings["rsm.config.dir"]
    s3 = moto.config(prefix="tiered-e2e")
    del s3["log.dirs"]
    proc = BrokerProcess(str(tmp_path_factory.mktemp("tiered-s3") / "data"), settings={**settings, **s3})
    proc.start()
    yield proc, moto
    proc.stop()
    moto.kill()


def keys(moto, topic: str) -> list[str]:
    out = moto.client().list_objects_v2(Bucket=BUCKET, Prefix=f"tiered-e2e/{topic}-0-")
    return [o["Key"] for o in out.get("Contents", [])]


def test_consumer_reads_from_offset_zero_through_s3(s3_broker):
    proc, moto = s3_broker
    topic = "tiered-s3"
    create(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 500)
    wait_for("local segments tiered to S3", lambda: offsets(proc.bootstrap, topic)[-4] > 0)
    assert any(k.endswith(".log") for k in keys(moto, topic))
    assert offsets(proc.bootstrap, topic)[-2] == 0
    got = consume_all(proc.bootstrap, topic, 500)
    assert [o for o, _v in got] == list(range(500))
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    admin.delete_topics([topic])[topic].result(15)
    wait_for("the topic's objects deleted from the bucket", lambda: not keys(moto, topic))
