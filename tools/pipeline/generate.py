"""Load generator: order and click events into a topic, with confluent-kafka.

    python -m tools.pipeline.generate --bootstrap 127.0.0.1:9092 --topic events --count 100000

Events are deterministic for a seed (`make_events`), so a test can compute
what the pipeline must output. The Kafka record key is the event key and the
record timestamp is the event time (CreateTime), so a replay by timestamp
selects by event time. By default the series ends now, one event per `step_ms`.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

ITEMS = 50
PAGES = ("/", "/products", "/cart", "/search", "/account")


def make_events(count: int, *, seed: int = 7, keys: int = 10, start_ms: int | None = None,
                step_ms: int = 1000, order_ratio: float = 0.3, id_prefix: str = "e") -> Iterator[dict]:
    """`count` events; event i has time start_ms + i * step_ms."""
    rng = random.Random(seed)
    if start_ms is None:
        start_ms = int(time.time() * 1000) - max(count - 1, 0) * step_ms
    width = max(6, len(str(count)))
    for i in range(count):
        key = f"customer-{rng.randrange(keys)}"
        event = {"id": f"{id_prefix}-{i:0{width}d}", "key": key, "ts": start_ms + i * step_ms}
        if rng.random() < order_ratio:
            item = rng.randrange(ITEMS)
            quantity = rng.randint(1, 5)
            cents = quantity * rng.randint(99, 4999)
            event["kind"] = "order"
            event["fields"] = {"item": f"sku-{item}", "quantity": quantity, "amount": cents / 100}
        else:
            page = rng.choice(PAGES)
            if page == "/products":
                page += f"/sku-{rng.randrange(ITEMS)}"
            event["kind"] = "click"
            event["fields"] = {"page": page}
        yield event


def encode(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


@dataclass
class Report:
    requested: int
    delivered: int
    failed: int
    seconds: float
    first_error: str | None = None
    # (topic, partition, offset, timestamp ms) of each delivered record, in
    # delivery order; kept only when asked for.
    deliveries: list[tuple[str, int, int, int]] | None = None

    @property
    def rate(self) -> float:
        return self.delivered / self.seconds if self.seconds > 0 else 0.0


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, a line per
    10% otherwise (logs, CI)."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self.last_draw = 0.0
        self.next_decile = 1

    def update(self, done: int, failed: int = 0, final: bool = False) -> None:
        now = time.monotonic()
        pct = 100 * done // self.total if self.total else 100
        if self.tty:
            if not final and now - self.last_draw < 0.2:
                return
            end = "\n" if final else ""
            self.stream.write(f"\r{self._line(done, failed, now, pct)}{end}")
        else:
            if not final and pct < 10 * self.next_decile:
                return
            self.next_decile = pct // 10 + 1
            self.stream.write(self._line(done, failed, now, pct) + "\n")
        self.last_draw = now
        self.stream.flush()

    def _line(self, done: int, failed: int, now: float, pct: int) -> str:
        elapsed = max(now - self.started, 1e-9)
        bar = "#" * (pct // 5)
        fail = f", {failed} failed" if failed else ""
        return (f"[{bar:<20}] {done}/{self.total} events ({pct}%) "
                f"{done / elapsed:,.0f}/s{fail}")


def produce_events(bootstrap: str, topic: str, events: Iterable[dict], *, total: int | None = None,
                   producer_config: dict | None = None, progress: bool = False,
                   rate: float | None = None, record_timestamps: bool = True,
                   keep_deliveries: bool = False, timeout: float = 60.0,
                   partition_of: Callable[[int, dict], int] | None = None) -> Report:
    """Produce the events (idempotent producer, acks=all) and wait for every
    delivery report. `partition_of(i, event)` picks a partition; by default
    the producer's partitioner does, by key."""
    from confluent_kafka import Producer

    events = list(events) if total is None else events
    total = len(events) if total is None else total
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
            "compression.type": "lz4"}
    conf.update(producer_config or {})
    producer = Producer(conf)
    counts = {"ok": 0, "failed": 0}
    first_error: list[str] = []
    deliveries: list | None = [] if keep_deliveries else None
    bar = Progress(total) if progress else None

    def on_delivery(err, msg):
        if err is not None:
            counts["failed"] += 1
            if not first_error:
                first_error.append(str(err))
            return
        counts["ok"] += 1
        if deliveries is not None:
            deliveries.append((msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1]))

    started = time.monotonic()
    for sent, event in enumerate(events, 1):
        kwargs = {"key": event["key"].encode(), "value": encode(event), "on_delivery": on_delivery}
        if record_timestamps:
            kwargs["timestamp"] = event["ts"]
        if partition_of is not None:
            kwargs["partition"] = partition_of(sent - 1, event)
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if rate:
            lag = sent / rate - (time.monotonic() - started)
            if lag > 0:
                time.sleep(lag)
        if bar:
            bar.update(counts["ok"], counts["failed"])
    remaining = producer.flush(timeout)
    seconds = time.monotonic() - started
    if bar:
        bar.update(counts["ok"], counts["failed"], final=True)
    if remaining and not first_error:
        first_error.append(f"{remaining} messages still undelivered after {timeout} s")
    return Report(total, counts["ok"], counts["failed"] + remaining, seconds,
                  first_error[0] if first_error else None, deliveries)


def generate(bootstrap: str, topic: str, count: int, *, seed: int = 7, keys: int = 10,
             start_ms: int | None = None, step_ms: int = 1000, order_ratio: float = 0.3,
             rate: float | None = None, progress: bool = True,
             producer_config: dict | None = None) -> Report:
    events = make_events(count, seed=seed, keys=keys, start_ms=start_ms, step_ms=step_ms,
                         order_ratio=order_ratio)
    return produce_events(bootstrap, topic, events, total=count, producer_config=producer_config,
                          progress=progress, rate=rate)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="bootstrap servers (host:port,...)")
    ap.add_argument("--topic", default="events")
    ap.add_argument("--count", type=int, default=10_000, help="number of events")
    ap.add_argument("--keys", type=int, default=10, help="distinct event keys (customers)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--start-ms", type=int, help="time of the first event (default: the series ends now)")
    ap.add_argument("--step-ms", type=int, default=1000, help="event-time step between events")
    ap.add_argument("--order-ratio", type=float, default=0.3, help="share of orders (the rest are clicks)")
    ap.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    ap.add_argument("--producer-option", action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka producer setting (repeatable)")
    ap.add_argument("--quiet", action="store_true", help="no progress line")


def run(args: argparse.Namespace) -> int:
    report = generate(args.bootstrap, args.topic, args.count, seed=args.seed, keys=args.keys,
                      start_ms=args.start_ms, step_ms=args.step_ms, order_ratio=args.order_ratio,
                      rate=args.rate, progress=not args.quiet,
                      producer_config=parse_settings(args.producer_option))
    print(f"delivered {report.delivered}/{report.requested} events to {args.topic} in "
          f"{report.seconds:.2f} s ({report.rate:,.0f}/s)"
          + (f"; {report.failed} failed: {report.first_error}" if report.failed else ""))
    return 0 if report.failed == 0 else 1


def parse_settings(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.pipeline.generate", description=__doc__.split("\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
