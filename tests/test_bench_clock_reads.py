"""The request bench reads a broker's CPU clock only once the broker rests
(tools/bench/procstat.wait_off_cpu): another process's CPU clock, read while
that process runs, lacks what it did since the scheduler last accounted it,
and a span read at an answer misses the work done after the answer. The
request bench's LeaveGroup (the last request of a group's life, its span
ending at its answer) read 25 µs for the 2026-11-22 build on a quiet machine,
a third of a Heartbeat, and 7x less than main's (issue 26). Not a timed test:
a process that answers and then works 200 ms of CPU must be charged those
200 ms, which a read at the answer could not see."""
from __future__ import annotations

import subprocess
import sys

from tools.bench import procstat
from tools.bench.request_cost import cpu_ns

# answers each line, then spins for 200 ms of its own CPU time before reading the next
WORKER = """
import sys, time
for line in sys.stdin:
    sys.stdout.write("ok\\n"); sys.stdout.flush()
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
"""


def test_a_span_ending_at_an_answer_counts_the_work_after_it():
    p = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert procstat.wait_off_cpu(p.pid, 5.0)
        t0 = cpu_ns(p.pid)
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline() == "ok\n"
        assert procstat.wait_off_cpu(p.pid, 5.0)      # the worker rests again, its 200 ms done
        span = cpu_ns(p.pid) - t0
        assert span >= 190_000_000, span
    finally:
        p.kill()
        p.wait(10)
