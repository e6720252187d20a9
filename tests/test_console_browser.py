"""The web console (/console on the metrics listener, broker/console) in a real browser: Debian's
headless Chromium driven by Selenium clicks through the overview, a topic, the message browser and
a consumer group of a live 3-node cluster with a producer and a lagging consumer group running,
and checks what each page shows against the cluster (brokers, quorum leader, partitions and ISR,
the records produced, committed offsets and lag). With an authorizer, two SCRAM users see only
what their ACLs allow, and a change made from the console (writes enabled) is the user's own,
refused without the ACL for it. A screenshot of every page goes to <pytest basetemp>/console-screenshots
(or $KPROTO_CONSOLE_SCREENSHOTS)."""
from __future__ import annotations

import base64
import os
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.security_helpers import SecureBroker
from tests.test_admin_cli import kp, ok
from tools.cluster_client import QUIET, wait_until
from tools.quorum_cluster import QuorumCluster

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="Debian's chromium and chromium-driver are not "
                                                               "installed (.ci/run installs them)"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("KPROTO_CONSOLE_SCREENSHOTS") or str(tmp_path_factory.getbasetemp() / "console-screenshots")
    os.makedirs(d, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--window-size=1280,1400"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _text(driver, element_id: str) -> str:
    from selenium.common.exceptions import NoSuchElementException
    from selenium.webdriver.common.by import By
    try:
        return driver.find_element(By.ID, element_id).text
    except NoSuchElementException:
        raise AssertionError(f"no #{element_id} on {driver.current_url}: "
                             f"{driver.page_source.split('<main>')[-1][:1500]}") from None


def _rows(driver, table_id: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By
    rows = driver.find_element(By.ID, table_id).find_elements(By.TAG_NAME, "tr")[1:]
    return [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]


def _click(driver, how, what) -> None:
    """Click a link or a form's button and wait for the next page (a click returns before the
    browser has loaded it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(how, what).click()
    WebDriverWait(driver, 60).until(expected_conditions.staleness_of(old))
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")


class _Traffic:
    """A producer (bounded: at most 20,000 records or the test's end) and a consumer group that
    consumes part of the topic and commits, leaving lag."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._produce, daemon=True)

    def _produce(self) -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, **QUIET})
        while not self.stop.is_set() and self.sent < 20000:
            for _ in range(50):
                p.produce(self.topic, key=b"k%d" % (self.sent % 17), value=b'{"n": %d}' % self.sent)
                self.sent += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(10)


@pytest.fixture(scope="module")
def cluster():
    with QuorumCluster(3, settings={"kproto.metrics.listener": "http://127.0.0.1:0"}) as c:
        yield c


@pytest.mark.long
def test_console_pages_of_a_three_node_cluster_with_traffic(cluster, browser, shots):
    from confluent_kafka import Consumer
    from selenium.webdriver.common.by import By
    b = type("B", (), {"bootstrap": cluster.bootstrap})()
    wait_until(lambda: len(ok(kp(b, "cluster", "info", "--format", "json")).json["brokers"]) == 3, 60, "3 brokers")
    ok(kp(b, "topic", "create", "orders", "-p", "6", "-r", "3"))
    traffic = _Traffic(cluster.bootstrap, "orders")
    traffic.thread.start()
    wait_until(lambda: traffic.sent >= 1000, 30, "1000 records produced")
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **QUIET})
    c.subscribe(["orders"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 300 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()   # the group keeps its offsets and its lag grows with the producer

    base = cluster.nodes[1].metrics_url.rsplit("/", 1)[0] + "/console"
    try:
        browser.get(base)
        assert _text(browser, "brokers") == "3"
        leader = ok(kp(b, "cluster", "quorum", "--format", "json")).json["leader_id"]
        assert _text(browser, "quorum-leader") == str(leader) == _text(browser, "controller")
        assert _text(browser, "under-replicated") == "0" and _text(browser, "offline") == "0"
        assert [r[0] for r in _rows(browser, "broker-table")] == ["1", "2", "3"]

        _click(browser, By.ID, "nav-topics")
        assert "orders" in [r[0] for r in _rows(browser, "topic-table")]
        browser.find_element(By.ID, "filter").send_keys("ord")
        _click(browser, By.ID, "filter-go")
        assert [r[0] for r in _rows(browser, "topic-table")] == ["orders"]
        browser.save_screenshot(os.path.join(shots, "topics.png"))
        _click(browser, By.LINK_TEXT, "orders")
        parts = _rows(browser, "partition-table")
        described = ok(kp(b, "topic", "describe", "orders", "--format", "json")).json[0]["partitions"]
        assert [(r[0], r[1], r[2], r[3]) for r in parts] == [
            (str(p["partition"]), str(p["leader"]), ",".join(map(str, p["replicas"])), ",".join(map(str, p["isr"])))
            for p in described]
        assert all(r[7] != "-" for r in parts)   # sizes from DescribeLogDirs
        browser.save_screenshot(os.path.join(shots, "topic.png"))

        _click(browser, By.ID, "browse")
        from selenium.webdriver.support.ui import Select
        Select(browser.find_element(By.ID, "partition")).select_by_value("0")
        browser.find_element(By.ID, "offset").send_keys("0")
        Select(browser.find_element(By.ID, "decode")).select_by_visible_text("json")
        _click(browser, By.ID, "go")
        msgs = _rows(browser, "message-table")
        assert len(msgs) == 20 and [r[0] for r in msgs] == [str(i) for i in range(20)]
        assert all(r[2].startswith("k") and '"n":' in r[4] for r in msgs)
        first = ok(kp(b, "consume", "orders", "-p", "0", "--offset", "0", "-n", "1", "--format", "json")).lines[0]
        assert msgs[0][2] == first["key"] and first["value"].replace(" ", "") in msgs[0][4].replace(" ", "").replace("\n", "")
        browser.save_screenshot(os.path.join(shots, "messages.png"))
        _click(browser, By.ID, "more")
        assert [r[0] for r in _rows(browser, "message-table")][:1] == ["20"]

        _click(browser, By.ID, "nav-groups")
        assert ["billing", "Empty", "consumer"] in _rows(browser, "group-table")
        _click(browser, By.LINK_TEXT, "billing")
        lag_rows = _rows(browser, "lag-table")
        d = ok(kp(b, "group", "describe", "billing", "--format", "json")).json[0]
        committed = {str(r["partition"]): str(r["current_offset"]) for r in d["offsets"]}
        assert {r[1]: r[2] for r in lag_rows} == committed
        assert sum(int(r[2]) for r in lag_rows) == 300
        assert int(_text(browser, "total-lag")) > 0
        assert browser.find_element(By.CSS_SELECTOR, "#lag-chart svg")
        time.sleep(11)    # two more samples of the lag and of the throughput counters
        browser.refresh()
        assert browser.find_element(By.CSS_SELECTOR, "#lag-chart svg .series")
        browser.save_screenshot(os.path.join(shots, "group.png"))

        _click(browser, By.ID, "nav-overview")
        charts = browser.find_elements(By.CSS_SELECTOR, "#throughput svg")
        assert len(charts) == 2 and "records in/s" in charts[1].text
        assert browser.find_elements(By.CSS_SELECTOR, "#throughput svg .series")   # lines, not "collecting"
        browser.save_screenshot(os.path.join(shots, "overview.png"))
    finally:
        traffic.stop.set()
        traffic.thread.join(15)


# -- with an authorizer: log in, and see what the ACLs allow --------------------------------------

@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    b = SecureBroker(str(tmp_path_factory.mktemp("console-acl")), None, listeners=("SASL_PLAINTEXT",), settings={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "kproto.console.writes.enable": "true",
        "kproto.metrics.listener": "http://127.0.0.1:0"})
    b.metrics = True
    b.start()
    yield b
    b.stop()


def _as(browser, user: str, password: str) -> None:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Basic {token}"}})


def test_console_login_and_acl_filtered_views_of_two_users(secured, browser, shots):
    from selenium.webdriver.common.by import By
    for topic in ("alice-orders", "bob-payments"):
        ok(kp(secured, "topic", "create", topic, "-p", "2"))
        ok(kp(secured, "produce", topic, "-p", "0", stdin=f"{topic} record\n".encode()))
    ok(kp(secured, "user", "create", "alice", "--password", "alice-pw"))
    ok(kp(secured, "user", "create", "bob", "--password", "bob-pw", "--mechanism", "SCRAM-SHA-512"))
    for user, topic in (("alice", "alice-orders"), ("bob", "bob-payments")):
        for op in ("describe", "read"):
            ok(kp(secured, "acl", "create", "--resource-type", "topic", "--resource-name", topic,
                  "--principal", f"User:{user}", "--operation", op))
    base = secured.metrics_url.rsplit("/", 1)[0] + "/console"

    # no credentials, or wrong ones: 401 with a Basic challenge
    for auth in (None, "alice:wrong"):
        req = urllib.request.Request(base + "/topics")
        if auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 401 and err.value.headers["WWW-Authenticate"].startswith("Basic ")

    for user, password, mine, theirs in (("alice", "alice-pw", "alice-orders", "bob-payments"),
                                         ("bob", "bob-pw", "bob-payments", "alice-orders")):
        _as(browser, user, password)
        browser.get(base + "/topics")
        assert _text(browser, "user") == user
        assert [r[0] for r in _rows(browser, "topic-table")] == [mine]
        browser.save_screenshot(os.path.join(shots, f"topics-as-{user}.png"))
        _click(browser, By.LINK_TEXT, mine)
        assert len(_rows(browser, "partition-table")) == 2
        _click(browser, By.ID, "browse")
        assert [r[4] for r in _rows(browser, "message-table")] == [f"{mine} record"]
        browser.get(f"{base}/topics/{theirs}")
        assert "TOPIC_AUTHORIZATION_FAILED" in _text(browser, "error")
        assert not browser.find_elements(By.ID, "partition-table")
        browser.get(f"{base}/topics/{theirs}/messages")
        assert "TOPIC_AUTHORIZATION_FAILED" in _text(browser, "error")

    # changes (kproto.console.writes.enable) are made as the user: the authorizer decides
    browser.get(base + "/topics")
    browser.find_element(By.ID, "create-name").send_keys("bob-new")
    _click(browser, By.ID, "create-go")
    assert "TOPIC_AUTHORIZATION_FAILED" in _text(browser, "error")
    ok(kp(secured, "acl", "create", "--resource-type", "topic", "--resource-name", "bob-", "--pattern-type",
          "prefixed", "--principal", "User:bob", "--operation", "all"))
    browser.get(base + "/topics")
    browser.find_element(By.ID, "create-name").send_keys("bob-new")
    browser.find_element(By.ID, "create-partitions").send_keys("3")
    _click(browser, By.ID, "create-go")
    assert _text(browser, "topic-name") == "bob-new" and len(_rows(browser, "partition-table")) == 3
    browser.save_screenshot(os.path.join(shots, "topic-created-by-bob.png"))
