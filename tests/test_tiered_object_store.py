"""Tiered storage's object stores, as the remote log manager sees them: the local directory and
S3 (a real moto server over HTTP), through the same `open_store(broker config)`: round trips,
byte ranges, large multipart uploads of a file prefix, listing, deleting, missing objects, and
the one-line start-up errors of bad `rsm.config.` settings."""
from __future__ import annotations

import os

import pytest
import trio

from broker.config.broker_config import BrokerConfig
from broker.config.types import StartupError
from broker.tiered.object_store import ObjectNotFound, ObjectStore, ObjectStoreError, open_store
from tools.s3_server import BUCKET, MotoServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def moto():
    server = MotoServer().start()
    yield server
    server.kill()


@pytest.fixture(params=["local", "s3"])
def kind(request):
    return request.param


@pytest.fixture
def config(kind, request, tmp_path):
    if kind == "local":
        return {"log.dirs": str(tmp_path / "data")}
    moto = request.getfixturevalue("moto")
    # each test its own folder of the bucket
    return moto.config(prefix=f"t/{request.node.name.replace('[', '-').rstrip(']')}",
                       multipart_part_size_bytes=str(5 * MiB))


def run(config, test):
    async def main():
        store = open_store(config)
        try:
            with trio.fail_after(60):
                return await test(store)
        finally:
            await store.aclose()
    return trio.run(main)


def test_round_trip_and_ranges(config):
    async def test(store: ObjectStore):
        assert isinstance(store, ObjectStore)
        data = bytes(range(256)) * 40   # 10240 bytes
        await store.put("topic-Xy/0/00000000000000000000.log", data)
        key = "topic-Xy/0/00000000000000000000.log"
        assert await store.get(key) == data
        assert await store.size(key) == len(data)
        assert await store.get(key, 100, 356) == data[100:356]
        assert await store.get(key, 10000) == data[10000:]
        assert await store.get(key, 10000, 20000) == data[10000:]     # clipped at the end
        assert await store.get(key, len(data)) == b""                 # at / past the end
        assert await store.get(key, len(data) + 5, len(data) + 9) == b""
        assert await store.get(key, 7, 7) == b""
        await store.put(key, b"replaced")                              # overwrite
        assert await store.get(key) == b"replaced"
        await store.put("empty", b"")
        assert await store.get("empty") == b"" and await store.size("empty") == 0
    run(config, test)


def test_missing_objects_and_bad_keys(config):
    async def test(store):
        with pytest.raises(ObjectNotFound):
            await store.get("no/such/object")
        with pytest.raises(ObjectNotFound):
            await store.get("no/such/object", 5, 10)
        with pytest.raises(ObjectNotFound):
            await store.size("no/such/object")
        await store.put("a/b", b"x")
        for not_an_object in ("a", "a/b/c"):        # a folder of keys, a key below a key
            with pytest.raises(ObjectNotFound):
                await store.get(not_an_object)
        for bad in ("", "/abs", "a//b", "a/../../etc/passwd", "a/./b"):
            with pytest.raises(ValueError):
                await store.put(bad, b"x")
    run(config, test)


def test_large_put_file_prefix_is_uploaded_in_parts(config, kind, tmp_path, request):
    segment = tmp_path / "00000000000000000000.log"
    data = os.urandom(MiB) * 21           # 21 MiB on disk; upload its first 20 MiB + 3 bytes
    segment.write_bytes(data)
    length = 20 * MiB + 3

    async def test(store):
        await store.put_file("seg/big.log", str(segment), length)
        assert await store.size("seg/big.log") == length
        assert await store.get("seg/big.log", 0, 1000) == data[:1000]
        got = await store.get("seg/big.log")
        assert len(got) == length and got == data[:length]
        await store.put_file("seg/whole.log", str(segment))   # no length: the whole file
        assert await store.size("seg/whole.log") == len(data)
        await store.put_file("seg/small.log", str(segment), 10)
        assert await store.get("seg/small.log") == data[:10]
        with pytest.raises(ObjectStoreError) as e:                  # no file to upload
            await store.put_file("seg/none.log", str(tmp_path / "missing.log"))
        assert not isinstance(e.value, ObjectNotFound)
        # a file shorter than the length asked for (truncated under the copier): an error, and
        # no object
        for short in (len(data) + 1, 100):
            small = tmp_path / "short.log"
            small.write_bytes(data[:short - 1])
            with pytest.raises(ObjectStoreError):
                await store.put_file("seg/short.log", str(small), short)
            with pytest.raises(ObjectNotFound):
                await store.size("seg/short.log")
        return store
    store = run(config, test)
    if kind == "s3":
        # S3 tags an object uploaded in N parts with an ETag ending "-N": 5 MiB parts -> 5
        moto = request.getfixturevalue("moto")
        head = moto.client().head_object(Bucket=BUCKET, Key=config["rsm.config.prefix"] + "/seg/big.log")
        assert head["ETag"].strip('"').endswith("-5"), head["ETag"]
        assert head["ContentLength"] == length
    else:
        assert not os.listdir(os.path.join(store.root, ".kproto-tmp"))   # no temporary file left


def test_list_and_delete(config):
    async def test(store):
        keys = ["t-1/0/a.log", "t-1/0/a.index", "t-1/1/b.log", "t-10/0/c.log", "other"]
        for k in keys:
            await store.put(k, k.encode())
        assert await store.list("") == sorted(keys)
        assert await store.list("t-1") == ["t-1/0/a.index", "t-1/0/a.log", "t-1/1/b.log"]  # not t-10
        assert await store.list("t-1/0/") == ["t-1/0/a.index", "t-1/0/a.log"]
        assert await store.list("nothing/here") == []
        await store.delete(["t-1/0/a.log", "t-1/0/a.index", "never/was"])   # a missing key: fine
        await store.delete([])
        assert await store.list("") == ["other", "t-1/1/b.log", "t-10/0/c.log"]
        with pytest.raises(ObjectNotFound):
            await store.get("t-1/0/a.log")
    run(config, test)


def test_local_store_defaults_beside_the_first_log_dir_and_survives_a_crashed_put(tmp_path):
    first, second = tmp_path / "disk1" / "data", tmp_path / "disk2" / "data"
    store = open_store({"log.dirs": f"{first},{second}"})
    assert store.name == "file://" + str(tmp_path / "disk1" / "remote-storage")
    # a put cut by a crash leaves a temporary file: never listed, removed at the next open
    leftover = tmp_path / "disk1" / "remote-storage" / ".kproto-tmp" / "half-written"
    leftover.write_bytes(b"half")

    async def test(store):
        assert await store.list("") == []
    run({"log.dirs": f"{first},{second}"}, test)
    assert not leftover.exists()
    # a BrokerConfig (what the broker has) works too, and its rsm.config.* keys are no
    # "unknown config" to it
    cfg = BrokerConfig.load(overrides={"log.dirs": str(first), "rsm.config.dir": str(tmp_path / "r")})
    assert cfg.unknown_keys == []
    assert open_store(cfg).name == "file://" + str(tmp_path / "r")


@pytest.mark.parametrize("settings, named", [
    ({"rsm.config.store": "ftp"}, "rsm.config.store"),
    ({"rsm.config.buckett": "b"}, "rsm.config.buckett"),
    ({"rsm.config.store": "s3"}, "rsm.config.bucket"),
    ({"rsm.config.store": "s3", "rsm.config.bucket": "b", "rsm.config.endpoint": "http://127.0.0.1:9"},
     "rsm.config.allow.http"),
    ({"rsm.config.store": "s3", "rsm.config.bucket": "b", "rsm.config.request.timeout.ms": "soon"},
     "rsm.config.request.timeout.ms"),
    ({"rsm.config.store": "s3", "rsm.config.bucket": "b", "rsm.config.allow.http": "yes"},
     "rsm.config.allow.http"),
    ({"rsm.config.store": "s3", "rsm.config.bucket": "b", "rsm.config.access.key.id": "k"},
     "rsm.config.secret.access.key"),
    ({"rsm.config.store": "s3", "rsm.config.bucket": "b", "rsm.config.multipart.part.size.bytes": "1024"},
     "rsm.config.multipart.part.size.bytes"),
    ({"rsm.config.store": "azure", "rsm.config.bucket": "c"}, "rsm.config.account"),
])
def test_bad_settings_are_one_line_startup_errors_naming_the_key(settings, named, tmp_path):
    with pytest.raises(StartupError) as e:
        open_store({"log.dirs": str(tmp_path / "data"), **settings})
    message = str(e.value)
    assert named in message and "\n" not in message, message


def test_gcs_and_azure_stores_are_configured_from_the_same_keys(tmp_path, monkeypatch):
    # (no such servers here: configured, not spoken to)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME", raising=False)
    base = {"log.dirs": str(tmp_path / "data"), "rsm.config.bucket": "b", "rsm.config.prefix": "c1"}
    assert open_store({**base, "rsm.config.store": "gs"}).name == "gs://b/c1"
    assert open_store({**base, "rsm.config.store": "azure", "rsm.config.account": "acct"}).name == "azure://b/c1"
