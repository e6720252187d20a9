"""tools/memtrace.py (issue 26): `compare` names the allocation site that grew between two
snapshots, and the soak's RSS split into heap and mapped files reads /proc."""
import os
import re
import tracemalloc

from tools import memtrace
from tools.chaos.resources import rss_mib, rss_parts_mib


def _grow(n):
    return [bytearray(100) for _ in range(n)]   # the site compare must name


def test_compare_names_the_growing_site(tmp_path, capsys):
    tracemalloc.start(5)
    try:
        old = tmp_path / "old.tm"
        new = tmp_path / "new.tm"
        tracemalloc.take_snapshot().dump(str(old))
        kept = _grow(2000)
        tracemalloc.take_snapshot().dump(str(new))
    finally:
        tracemalloc.stop()
    memtrace.compare(str(old), str(new), top=1, frames=2)
    out = capsys.readouterr().out
    assert len(kept) == 2000
    first = re.search(r"\n\s*\+([\d.]+) KiB\s+\+(\d+) blocks", out)
    assert first and float(first[1]) >= 2000 * 100 / 1024 and int(first[2]) >= 2000, out
    assert "bytearray(100) for _ in range(n)" in out, out


def test_rss_parts_are_heap_and_files():
    anon, file = rss_parts_mib(os.getpid())
    assert anon > 1 and file > 1
    assert anon + file <= rss_mib(os.getpid()) + 1   # (RssShmem is the third part)
