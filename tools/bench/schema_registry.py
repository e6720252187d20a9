"""Schema registry figures: registrations/s, lookups/s and the time a serializer adds per record.

Starts one `kproto serve` with schema.registry.listeners on a free port and measures, from one
client thread over a kept-alive HTTP connection:
  register   POST /subjects/S/versions, each a new Avro schema (a new id, a _schemas record)
  by-id      GET /schemas/ids/ID, every id once (what a deserializer asks on a cache miss)
  by-schema  POST /subjects/S, the registry parses and compares the schema (lookup, deleted=true)
  client     SchemaRegistryClient.get_schema on ids it has seen (the client's cache, no HTTP)
  serializer AvroSerializer per record: the first call (registration round trip) and the steady state

--forwarded N instead starts a 3-node cluster (tools/quorum_cluster.py) with the registry on every
node and registers N new Avro schemas through a node that is not the writer (each forwarded to the
writer over HTTP), then N through the writer itself, from one client thread each.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def _schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "namespace": "bench",
                       "fields": [{"name": "id", "type": "long"}, {"name": f"f{i}", "type": "string"}]})


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s ({seconds / n * 1e6:,.0f} us each)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.bench schema_registry", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=2000, help="schemas to register (default 2000)")
    ap.add_argument("--records", type=int, default=20000, help="records through the serializer (default 20000)")
    ap.add_argument("--quick", action="store_true", help="200 schemas, 2000 records")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    ap.add_argument("--forwarded", type=int, metavar="N", help="forwarded registrations in a 3-node cluster")
    args = ap.parse_args(argv)
    if args.forwarded:
        return forwarded(args.forwarded, args.json)
    if args.quick:
        args.count, args.records = 200, 2000
    import requests
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from broker.launch.process import BrokerProcess, free_port
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = BrokerProcess(settings={"schema.registry.listeners": url}, new_session=True)
    proc.start()
    out = {}
    try:
        http = requests.Session()
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
        ids = []
        # NONE: 50 subjects each get count/50 unrelated record schemas (BACKWARD would refuse them)
        http.put(f"{url}/config", data=json.dumps({"compatibility": "NONE"}), headers=headers).raise_for_status()
        started = time.perf_counter()
        for i in range(args.count):
            r = http.post(f"{url}/subjects/bench-{i % 50}/versions", data=json.dumps({"schema": _schema(i)}),
                          headers=headers, params={"normalize": "false"})
            r.raise_for_status()
            ids.append(r.json()["id"])
        out["register_s"] = time.perf_counter() - started
        started = time.perf_counter()
        for sid in ids:
            http.get(f"{url}/schemas/ids/{sid}").raise_for_status()
        out["by_id_s"] = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(args.count):
            http.post(f"{url}/subjects/bench-{i % 50}", data=json.dumps({"schema": _schema(i)}),
                      headers=headers).raise_for_status()
        out["by_schema_s"] = time.perf_counter() - started
        client = SchemaRegistryClient({"url": url})
        for sid in ids:
            client.get_schema(sid)
        started = time.perf_counter()
        for _ in range(5):
            for sid in ids:
                client.get_schema(sid)
        out["client_cached_s"] = (time.perf_counter() - started) / 5
        ser = AvroSerializer(SchemaRegistryClient({"url": url}), _schema(10**6))
        ctx = SerializationContext("bench-ser", MessageField.VALUE)
        t0 = time.perf_counter()
        ser({"id": 0, f"f{10**6}": "x"}, ctx)
        out["serializer_first_us"] = (time.perf_counter() - t0) * 1e6
        samples = []
        for n in range(args.records):
            t0 = time.perf_counter()
            ser({"id": n, f"f{10**6}": "payload"}, ctx)
            samples.append(time.perf_counter() - t0)
        out["serializer_median_us"] = statistics.median(samples) * 1e6
        out["serializer_p99_us"] = sorted(samples)[int(len(samples) * 0.99)] * 1e6
        import fastavro
        parsed = fastavro.parse_schema(json.loads(_schema(10**6)))
        import io
        samples = []
        for n in range(args.records):
            t0 = time.perf_counter()
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, {"id": n, f"f{10**6}": "payload"})
            samples.append(time.perf_counter() - t0)
        out["plain_avro_median_us"] = statistics.median(samples) * 1e6
    finally:
        proc.stop()
    out["count"], out["records"] = args.count, args.records
    if args.json:
        print(json.dumps(out))
        return
    n = args.count
    print(f"schema registry, one node, one client thread, {n} Avro schemas in 50 subjects:")
    print(f"  register (new id, one _schemas record each): {_rate(n, out['register_s'])}")
    print(f"  lookup by id (GET /schemas/ids/ID):          {_rate(n, out['by_id_s'])}")
    print(f"  lookup by schema (POST /subjects/S):         {_rate(n, out['by_schema_s'])}")
    print(f"  client cache (SchemaRegistryClient):         {_rate(n, out['client_cached_s'])}")
    print(f"AvroSerializer, {args.records} records: first call {out['serializer_first_us']:,.0f} us "
          f"(registers), then median {out['serializer_median_us']:.1f} us, p99 {out['serializer_p99_us']:.1f} us "
          f"per record; plain fastavro encoding {out['plain_avro_median_us']:.1f} us")


def forwarded(n: int, as_json: bool) -> None:
    import requests

    from broker.launch.process import free_port
    from tools.quorum_cluster import QuorumCluster
    reg = {i: free_port() for i in (1, 2, 3)}
    met = {i: free_port() for i in (1, 2, 3)}
    node_settings = {i: {"schema.registry.listeners": f"http://127.0.0.1:{reg[i]}",
                         "kproto.metrics.listener": f"http://127.0.0.1:{met[i]}"} for i in reg}
    settings = {"offsets.topic.replication.factor": "3", "default.replication.factor": "3",
                "min.insync.replicas": "2"}
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    out = {"count": n}
    from tools.bench.procstat import cpu_seconds
    with QuorumCluster(3, settings=settings, node_settings=node_settings) as cluster:
        urls = {i: f"http://127.0.0.1:{p}" for i, p in reg.items()}
        http = requests.Session()
        writer = None
        deadline = time.monotonic() + 90
        while writer is None and time.monotonic() < deadline:   # bounded: the election takes seconds
            for i in urls:
                try:
                    if "\nkproto_schema_registry_writer 1.0" in http.get(f"http://127.0.0.1:{met[i]}/metrics",
                                                                          timeout=5).text:
                        writer = i
                except requests.RequestException:
                    pass
            time.sleep(0.5)
        if writer is None:
            raise SystemExit("no registry writer elected in 90 s")
        follower = next(i for i in urls if i != writer)
        http.put(f"{urls[writer]}/config", data=json.dumps({"compatibility": "NONE"}), headers=headers,
                 timeout=30).raise_for_status()
        for name, node, base in (("forwarded", follower, 0), ("direct", writer, n)):
            http.post(f"{urls[node]}/subjects/warm-{name}/versions", data=json.dumps({"schema": _schema(10**7 + base)}),
                      headers=headers, timeout=30).raise_for_status()
            cpu = {i: cpu_seconds(cluster.nodes[i].proc.pid) for i in urls}
            started = time.perf_counter()
            for i in range(n):
                http.post(f"{urls[node]}/subjects/fwd-{i % 10}/versions", data=json.dumps({"schema": _schema(base + i)}),
                          headers=headers, timeout=30).raise_for_status()
            out[f"{name}_s"] = time.perf_counter() - started
            # CPU of the nodes per registration: less disturbed by other load on the machine than wall time
            out[f"{name}_cpu_ms"] = {i: (cpu_seconds(cluster.nodes[i].proc.pid) - c) / n * 1000
                                     for i, c in cpu.items()}
            out[f"{name}_cpu_ms"] = {("writer" if i == writer else f"node{i}"): round(v, 2)
                                     for i, v in out[f"{name}_cpu_ms"].items()}
    if as_json:
        print(json.dumps(out))
        return
    print(f"schema registry, 3-node cluster, one client thread, {n} new Avro schemas each:")
    print(f"  through a follower (forwarded to the writer): {_rate(n, out['forwarded_s'])}")
    print(f"  through the writer itself:                   {_rate(n, out['direct_s'])}")
    print(f"  CPU ms per registration, forwarded: {out['forwarded_cpu_ms']}; direct: {out['direct_cpu_ms']}")


if __name__ == "__main__":
    main()
