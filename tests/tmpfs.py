"""A small tmpfs mounted for one test: a disk that fills up (ENOSPC) on demand. Needs root;
the test is skipped, not passed, where it cannot be mounted."""
from __future__ import annotations

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_tmpfs(path, size: str, inodes: int | None = None):
    """Mount a tmpfs of `size` (mount's syntax: "3m") at the new directory `path`, unmount after;
    `inodes`: at most that many files and directories (nr_inodes), to run out of them on demand."""
    os.makedirs(path)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
