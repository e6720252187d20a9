"""Tiered storage's object stores: put_file and get throughput (MiB/s) of a segment-sized file.

    python -m tools.bench object_store [--stores local,s3] [--size-mib 64] [--rounds 3]
                                       [--part-size-mib 8] [--dir DIR] [--endpoint URL --bucket B]

`local` writes to a directory (default: a temporary one beside the current folder; `--dir` to
measure another disk); `s3` starts moto's standalone server on loopback (tools/s3_server.py)
unless `--endpoint` names another S3-compatible server (credentials from the AWS chain then).
Each round uploads the file with put_file (multipart for S3), reads it back whole with get, and
reads it in 1 MiB ranges (a remote fetch's pattern); the median round is reported. moto keeps
objects in Python memory, so its figures are a floor of what a real S3 server gives."""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import trio

from broker.tiered.object_store import open_store

MiB = 1 << 20


async def _round(store, path: str, size: int, key: str) -> dict:
    t0 = time.perf_counter()
    await store.put_file(key, path)
    t1 = time.perf_counter()
    data = await store.get(key)
    t2 = time.perf_counter()
    assert len(data) == size
    del data
    for start in range(0, size, MiB):
        await store.get(key, start, start + MiB)
    t3 = time.perf_counter()
    await store.delete([key])
    return {"put_file MiB/s": size / MiB / (t1 - t0), "get MiB/s": size / MiB / (t2 - t1),
            "1 MiB ranges MiB/s": size / MiB / (t3 - t2)}


def _measure(config: dict, path: str, size: int, rounds: int) -> dict:
    async def main():
        store = open_store(config)
        try:
            results = [await _round(store, path, size, f"bench/{i}.log") for i in range(rounds)]
        finally:
            await store.aclose()
        return store.name, {k: statistics.median(r[k] for r in results) for k in results[0]}
    return trio.run(main)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench object_store", description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default="local,s3")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part-size-mib", type=int, default=8)
    ap.add_argument("--dir", default=None, help="local store directory (default: a temporary one)")
    ap.add_argument("--endpoint", default=None, help="an S3-compatible server instead of moto")
    ap.add_argument("--bucket", default=None)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="kproto-bench-store-", dir=".")
    moto = None
    try:
        segment = os.path.join(work, "segment.log")
        size = args.size_mib * MiB
        with open(segment, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(MiB))
        print(f"{args.size_mib} MiB file, {args.rounds} rounds, median:")
        for kind in args.stores.split(","):
            if kind == "local":
                config = {"log.dirs": os.path.join(work, "data"),
                          "rsm.config.dir": args.dir or os.path.join(work, "remote")}
            elif kind == "s3" and args.endpoint:
                config = {"log.dirs": work, "rsm.config.store": "s3", "rsm.config.bucket": args.bucket,
                          "rsm.config.endpoint": args.endpoint, "rsm.config.allow.http": "true"}
            elif kind == "s3":
                from tools.s3_server import MotoServer
                moto = MotoServer().start()
                config = moto.config()
            else:
                ap.error(f"unknown store {kind}")
            config["rsm.config.multipart.part.size.bytes"] = str(args.part_size_mib * MiB)
            name, result = _measure(config, segment, size, args.rounds)
            print(f"  {kind:<6} {name}: " + ", ".join(f"{k} {v:.0f}" for k, v in result.items()))
    finally:
        if moto is not None:
            moto.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0
