"""What the broker says about its log directory at start: a new directory,
a clean shutdown, or an unclean one with recovery (never "unclean" for a
directory that never held a broker)."""
from __future__ import annotations

from broker.launch.process import BrokerProcess


def _loading_line(proc: BrokerProcess) -> str:
    lines = [line for line in proc.stderr_lines if "logger=broker.storage.logmanager" in line
             and ("log directory" in line or "loaded" in line)]
    assert len(lines) == 1, proc.stderr_lines
    return lines[0]


def test_new_clean_and_unclean_starts(tmp_path):
    data = str(tmp_path / "data")
    proc = BrokerProcess(data, log_level="INFO").start()
    proc.stop()
    assert "is new: no logs to load" in _loading_line(proc)
    assert "unclean shutdown" not in "".join(proc.stderr_lines)

    proc = BrokerProcess(data, log_level="INFO").start()
    line = _loading_line(proc)
    assert "after a clean shutdown" in line
    proc.kill()

    proc = BrokerProcess(data, log_level="INFO").start()
    line = _loading_line(proc)
    assert "after an unclean shutdown: recovered" in line
    proc.stop()
