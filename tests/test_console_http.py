"""The web console over plain HTTP (no browser): topic and partition lists are paginated and
filtered on the server (a page carries at most 50 topics / 100 partitions), bad input gets an
error page with a 4xx status, and `kproto.console.enable=false` turns the console off while
/metrics keeps answering."""
from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from broker.launch.process import BrokerProcess
from tests.test_admin_cli import kp, ok

pytestmark = pytest.mark.timeout(120)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with BrokerProcess(str(tmp_path_factory.mktemp("console-http")), metrics=True) as b:
        yield b


def _topic_rows(html: str) -> list[str]:
    return re.findall(r'<a href="/console/topics/([^"]+)">', html)


def test_topics_and_partitions_are_paginated_and_filtered_on_the_server(node):
    base = node.metrics_url.rsplit("/", 1)[0] + "/console"
    names = [f"page-{i:03d}" for i in range(120)]
    ok(kp(node, "topic", "create", *names, "-p", "1"))
    ok(kp(node, "topic", "create", "wide", "-p", "250"))
    code, first = get(base + "/topics?q=page-")
    assert code == 200 and _topic_rows(first) == names[:50] and "page 1 of 3 (120 rows)" in first
    code, last = get(base + "/topics?q=page-&page=3")
    assert code == 200 and _topic_rows(last) == names[100:]
    code, one = get(base + "/topics?q=page-07")
    assert _topic_rows(one) == [f"page-07{i}" for i in range(10)]
    code, wide = get(base + "/topics/wide?page=2")
    parts = re.findall(r'messages\?partition=(\d+)"', wide)
    assert code == 200 and parts == [str(i) for i in range(100, 200)] and "page 2 of 3 (250 rows)" in wide
    code, page = get(base + "/topics/page-000/messages?partition=0&limit=abc")
    assert code == 400 and 'id="error">bad request' in page
    code, page = get(base + "/topics/page-000/messages?partition=9")
    assert code == 404 and "UNKNOWN_TOPIC_OR_PARTITION" in page
    code, page = get(base + "/groups/nobody")
    assert code == 404 and "GROUP_ID_NOT_FOUND" in page


def test_console_off_switch(tmp_path):
    with BrokerProcess(str(tmp_path), metrics=True, settings={"kproto.console.enable": "false"}) as b:
        base = b.metrics_url.rsplit("/", 1)[0]
        assert get(base + "/console") == (404, "the console is off (kproto.console.enable=false)\n")
        code, metrics = get(base + "/metrics")
        assert code == 200 and "kafka_server" in metrics
