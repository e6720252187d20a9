"""A log-linear latency histogram in the manner of HdrHistogram, pure Python.

Values are integers (the latency workload records microseconds). Below
``2 * SUB`` every value has a bucket of its own; above, each power of two is
split into ``SUB`` equal buckets, so a reported value is never more than
1/SUB (0.8 % with SUB = 128) above the true one: three significant figures at
any scale, in a few hundred sparse counters, mergeable across processes and
JSON-serialisable. Percentiles report the highest value a bucket can hold
(HdrHistogram's highestEquivalentValue), so they err on the slow side; the
maximum is kept exactly."""
from __future__ import annotations

import math

SUB = 128            # buckets per power of two
_LINEAR = 2 * SUB    # values below this are exact
_SHIFT0 = SUB.bit_length()  # bit_length of _LINEAR


def bucket(value: int) -> int:
    if value < _LINEAR:
        return max(value, 0)
    shift = value.bit_length() - _SHIFT0        # value >> shift lies in [SUB, 2*SUB)
    return _LINEAR + (shift - 1) * SUB + ((value >> shift) - SUB)


def highest(index: int) -> int:
    """The largest value that falls in bucket ``index``."""
    if index < _LINEAR:
        return index
    shift, sub = divmod(index - _LINEAR, SUB)
    shift += 1
    return ((SUB + sub) << shift) + (1 << shift) - 1


class Histogram:
    __slots__ = ("counts", "total", "max", "min")

    def __init__(self):
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0
        self.min = None

    def record(self, value: int) -> None:
        value = int(value)
        if value < 0:
            value = 0
        i = bucket(value)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.total += 1
        if value > self.max:
            self.max = value
        if self.min is None or value < self.min:
            self.min = value

    def merge(self, other: "Histogram") -> "Histogram":
        for i, n in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + n
        self.total += other.total
        self.max = max(self.max, other.max)
        if other.min is not None:
            self.min = other.min if self.min is None else min(self.min, other.min)
        return self

    def percentile(self, q: float) -> float:
        """Nearest rank, like tools.bench.stats.percentile; nan when empty.
        Never above the exact maximum."""
        if not self.total:
            return math.nan
        rank = max(1, math.ceil(q / 100 * self.total))
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= rank:
                return min(highest(i), self.max)
        return self.max

    def to_dict(self) -> dict:
        return {"counts": {str(k): v for k, v in self.counts.items()}, "total": self.total,
                "max": self.max, "min": self.min}

    @classmethod
    def from_dict(cls, d: dict) -> "Histogram":
        h = cls()
        h.counts = {int(k): v for k, v in d["counts"].items()}
        h.total, h.max, h.min = d["total"], d["max"], d.get("min")
        return h
