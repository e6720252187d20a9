"""The web console over plain HTTP (no browser): topic and partition lists are paginated and
filtered on the server (a page carries at most 50 topics / 100 partitions), bad input gets an
error page with a 4xx status, and `kproto.console.enable=false` turns the console off while
/metrics keeps answering."""
from __future__ import annotations

import re
import urllib.error
import urllib.parse
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def post(url: str, form: dict, origin: str | None) -> tuple[int, str, str]:
    """(status, body, Location) of a form POST, redirects not followed."""
    req = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST")
    if origin is not None:
        req.add_header("Origin", origin)
    try:
        with urllib.request.build_opener(_NoRedirect).open(req, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("Location", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Location", "")


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


def test_console_is_read_only_by_default(node):
    base = node.metrics_url.rsplit("/", 1)[0]
    code, page, _ = post(base + "/console/topics", {"name": "from-the-web"}, origin=base)
    assert code == 403 and "read-only (kproto.console.writes.enable=false)" in page
    assert "create-form" not in get(base + "/console/topics")[1]
    assert "from-the-web" not in {t["name"] for t in ok(kp(node, "topic", "list", "--format", "json")).json}


def test_console_writes_when_enabled_from_its_own_pages_only(tmp_path):
    with BrokerProcess(str(tmp_path), metrics=True, settings={"kproto.console.writes.enable": "true"}) as b:
        base = b.metrics_url.rsplit("/", 1)[0]
        assert 'id="create-form"' in get(base + "/console/topics")[1]
        # a form from another site, or with no origin at all, changes nothing
        for origin in ("http://evil.example", None):
            code, page, _ = post(base + "/console/topics", {"name": "web-t", "partitions": "3"}, origin=origin)
            assert code == 403 and "own pages" in page
        code, _page, location = post(base + "/console/topics", {"name": "web-t", "partitions": "3"}, origin=base)
        assert (code, location) == (303, "/console/topics/web-t")
        d = ok(kp(b, "topic", "describe", "web-t", "--format", "json")).json[0]
        assert d["partition_count"] == 3
        code, page, _ = post(base + "/console/topics", {"name": "web-t"}, origin=base)
        assert code == 502 and "TOPIC_ALREADY_EXISTS" in page

        ok(kp(b, "produce", "web-t", "-p", "0", stdin=b"a\nb\nc\n"))
        ok(kp(b, "consume", "web-t", "-p", "0", "--from-beginning", "-e", "-g", "web-g"))
        assert ok(kp(b, "group", "describe", "web-g", "--format", "json")).json[0]["total_lag"] == 0
        code, _page, location = post(base + "/console/groups/web-g/reset", {"to": "earliest"}, origin=base)
        assert (code, location) == (303, "/console/groups/web-g")
        assert ok(kp(b, "group", "describe", "web-g", "--format", "json")).json[0]["total_lag"] == 3

        code, page, _ = post(base + "/console/topics/web-t/delete", {"confirm": "wrong"}, origin=base)
        assert code == 400 and "confirm" in page
        code, _page, location = post(base + "/console/topics/web-t/delete", {"confirm": "web-t"}, origin=base)
        assert (code, location) == (303, "/console/topics")
        assert "web-t" not in {t["name"] for t in ok(kp(b, "topic", "list", "--format", "json")).json}


def test_console_off_switch(tmp_path):
    with BrokerProcess(str(tmp_path), metrics=True, settings={"kproto.console.enable": "false"}) as b:
        base = b.metrics_url.rsplit("/", 1)[0]
        assert get(base + "/console") == (404, "the console is off (kproto.console.enable=false)\n")
        code, metrics = get(base + "/metrics")
        assert code == 200 and "kafka_server" in metrics
