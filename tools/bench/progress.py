"""What the benchmark is doing, on stderr: one live line on a terminal, one
line per finished step otherwise (CI logs)."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stream=None, total_steps: int | None = None):
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.total_steps = total_steps
        self.done_steps = 0
        self.label = ""
        self.started = 0.0
        self._last_draw = 0.0

    def _prefix(self) -> str:
        if self.total_steps:
            return f"[{self.done_steps + 1}/{self.total_steps}] "
        return ""

    def step(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()
        if self.live:
            self._draw(f"{self._prefix()}{label} ...")

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.live or now - self._last_draw < 0.2:
            return
        self._last_draw = now
        pct = 100 * done // total if total else 0
        bar = "#" * (pct // 5) + "." * (20 - pct // 5)
        self._draw(f"{self._prefix()}{self.label} [{bar}] {pct:3d}% {now - self.started:5.1f} s")

    def finish(self, summary: str = "") -> None:
        elapsed = time.monotonic() - self.started
        line = f"{self._prefix()}{self.label}: {summary} ({elapsed:.1f} s)" if summary else \
            f"{self._prefix()}{self.label} ({elapsed:.1f} s)"
        self.done_steps += 1
        if self.live:
            self.stream.write("\r\033[K" + line + "\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        if self.live:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def _draw(self, text: str) -> None:
        self.stream.write("\r\033[K" + text[:160])
        self.stream.flush()
