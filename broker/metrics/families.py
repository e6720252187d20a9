"""Metric families as the collectors yield them (prometheus_client's Metric with samples)."""
from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample


def metric(name: str, doc: str, typ: str, samples=()) -> Metric:
    m = Metric(name, doc, typ)
    for sample_name, labels, value in samples:
        m.samples.append(Sample(sample_name, labels, value))
    return m


def gauge(name: str, doc: str, value=None, samples=()) -> Metric:
    m = metric(name, doc, "gauge")
    if value is not None:
        m.samples.append(Sample(name, {}, value))
    for labels, v in samples:
        m.samples.append(Sample(name, labels, v))
    return m


def counter(name: str, doc: str, samples) -> Metric:
    m = metric(name, doc, "counter")
    for labels, v in samples:
        m.samples.append(Sample(name + "_total", labels, v))
    return m
