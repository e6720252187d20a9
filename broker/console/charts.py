"""The console's charts: the broker's throughput (bytes in/out and records in per second, from
its own BrokerTopicMetrics counters) and each viewed group's total lag over time, sampled by one
background thread into bounded ring buffers, drawn as SVG line charts by pygal."""
from __future__ import annotations

import collections
import threading
import time

import trio

SAMPLE_EVERY_S = 5.0
KEEP = 360                 # 30 minutes at one sample every 5 s
LAG_GROUPS = 20            # groups whose lag is followed: the most recently viewed
LAG_FOLLOW_S = 600.0       # a group not viewed for this long is no longer sampled


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], unit: str) -> str:
    """An inline SVG line chart of (time, value) series, x labels as clock times."""
    import pygal
    from pygal.style import LightColorizedStyle
    chart = pygal.DateTimeLine(
        title=title, height=260, width=720, show_dots=False, fill=False, js=[],   # no scripts from elsewhere
        x_value_formatter=lambda dt: dt.strftime("%H:%M:%S"), x_label_rotation=20,
        y_title=unit, style=LightColorizedStyle, disable_xml_declaration=True, legend_at_bottom=True,
        no_data_text="collecting samples...")
    from datetime import datetime
    for name, points in series.items():
        chart.add(name, [(datetime.fromtimestamp(t), v) for t, v in points])
    return chart.render(is_unicode=True)


class Sampler:
    """One daemon thread: every SAMPLE_EVERY_S the throughput counters (read on the trio thread,
    where they change) and the total lag of recently viewed groups (through `lag_of`, a Kafka
    client call)."""

    def __init__(self, read_counters, trio_token):
        self._read = read_counters
        self._token = trio_token
        self.throughput: dict[str, collections.deque] = {
            k: collections.deque(maxlen=KEEP) for k in ("bytes in/s", "bytes out/s", "records in/s")}
        self.lag: dict[str, collections.deque] = {}
        self._followed: dict[str, tuple[float, object]] = {}   # group -> (last viewed, lag_of)
        self._lock = threading.Lock()
        self._last = None
        self._started = False

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="kproto-console-sampler", daemon=True).start()

    def follow(self, group: str, lag_of, total: int) -> None:
        """A group page was viewed: keep sampling its lag (with that viewer's client) for a while."""
        now = time.time()
        with self._lock:
            self._followed[group] = (now, lag_of)
            self.lag.setdefault(group, collections.deque(maxlen=KEEP)).append((now, total))
            if len(self._followed) > LAG_GROUPS:
                oldest = min(self._followed, key=lambda g: self._followed[g][0])
                del self._followed[oldest]

    def _run(self) -> None:
        while True:
            try:
                self._sample()
            except trio.RunFinishedError:
                return
            except Exception:   # noqa: BLE001 (a sample lost is a gap in a chart, never an error)
                pass
            time.sleep(SAMPLE_EVERY_S)

    def _sample(self) -> None:
        now = time.time()
        counters = trio.from_thread.run_sync(self._read, trio_token=self._token)
        if self._last is not None:
            then, before = self._last
            dt = max(now - then, 1e-3)
            for key, i in (("bytes in/s", 0), ("bytes out/s", 1), ("records in/s", 2)):
                self.throughput[key].append((now, max(0.0, (counters[i] - before[i]) / dt)))
        self._last = (now, counters)
        with self._lock:
            followed = [(g, f) for g, (seen, f) in self._followed.items() if now - seen < LAG_FOLLOW_S]
        for group, lag_of in followed:
            try:
                total = lag_of(group)
            except Exception:   # noqa: BLE001
                continue
            with self._lock:
                self.lag.setdefault(group, collections.deque(maxlen=KEEP)).append((now, total))

    def throughput_svg(self) -> str:
        with self._lock:
            series = {k: list(v) for k, v in self.throughput.items()}
        return (line_chart("Bytes in / out per second", {k: series[k] for k in ("bytes in/s", "bytes out/s")}, "B/s"),
                line_chart("Records in per second", {"records in/s": series["records in/s"]}, "records/s"))

    def lag_svg(self, group: str) -> str:
        with self._lock:
            points = list(self.lag.get(group, ()))
        return line_chart(f"Total lag of {group}", {"lag": points}, "records")
