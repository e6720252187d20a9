"""The committed codecs are exactly what tools/gen_protocol.py makes from
Kafka's message definitions: regenerate into a temporary folder and compare
every file byte for byte, with no file missing or left over."""
from __future__ import annotations

from pathlib import Path

import pytest

from tools import gen_protocol

REPO = Path(__file__).resolve().parents[1]
DEFS = gen_protocol.DEFS          # Kafka 4.3.1's definitions
OLD_DEFS = gen_protocol.OLD_DEFS  # Kafka 3.9's, for the versions 4.0 dropped
KPROTO = REPO / "kproto"
# folders that hold nothing but generated modules
GENERATED_DIRS = ("messages", "coordinator", "metadata", "storage")
GENERATED_TOP = ("_api_table.py", "errors.py")


def committed_files() -> set[str]:
    files = {name for name in GENERATED_TOP if (KPROTO / name).exists()}
    for sub in GENERATED_DIRS:
        files |= {p.relative_to(KPROTO).as_posix() for p in (KPROTO / sub).glob("*.py")}
    return files


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    for defs in (DEFS, OLD_DEFS):
        if not (defs / "messages").is_dir():
            missing = defs if not defs.exists() else defs / "messages"
            pytest.skip(f"Kafka's message definitions are missing: {missing} does not exist")
    out = tmp_path_factory.mktemp("kproto")
    written = gen_protocol.generate(DEFS, out, OLD_DEFS)
    return out, {p.relative_to(out).as_posix() for p in written}


def test_no_generated_file_missing_or_extra(regenerated):
    _out, names = regenerated
    committed = committed_files()
    assert sorted(names - committed) == [], "generated but not committed (run python3 -m tools.gen_protocol)"
    assert sorted(committed - names) == [], "committed but no longer generated (stale module)"


def test_every_generated_file_is_identical(regenerated):
    out, names = regenerated
    stale = [n for n in sorted(names)
             if (KPROTO / n).exists() and (out / n).read_bytes() != (KPROTO / n).read_bytes()]
    assert stale == [], f"{len(stale)} committed modules differ from the generator's output " \
                        f"(run python3 -m tools.gen_protocol): {stale[:10]}"


@pytest.mark.long
def test_generator_is_deterministic(regenerated, tmp_path):
    out, names = regenerated
    gen_protocol.generate(DEFS, tmp_path, OLD_DEFS)
    assert all((tmp_path / n).read_bytes() == (out / n).read_bytes() for n in names)
