"""How results are shown: rich tables (and key/value panels) for people, one JSON document for
`--format json`. Every command hands over plain data (dicts and lists) and a table layout."""
from __future__ import annotations

import json
import sys


def _console(stderr: bool = False):
    from rich.console import Console   # imported here: `kproto serve` never needs it
    stream = sys.stderr if stderr else sys.stdout
    # a pipe gets wide lines rather than columns folded at 80 characters
    width = None if stream.isatty() else 200
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def print_json(data) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()


def table(rows: list[dict], columns: list[tuple[str, str]], title: str | None = None) -> None:
    """rows of dicts; columns as (key, HEADER)."""
    from rich import box
    from rich.table import Table
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for _key, header in columns:
        t.add_column(header, overflow="fold")
    for row in rows:
        t.add_row(*(_cell(row.get(key)) for key, _h in columns))
    _console().print(t)


def fields(pairs: list[tuple[str, object]], title: str | None = None) -> None:
    """A two-column list of name: value."""
    from rich.table import Table
    t = Table(title=title, box=None, show_header=False, title_justify="left", pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for name, value in pairs:
        t.add_row(name, _cell(value))
    _console().print(t)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def emit(args, data, render) -> None:
    """JSON of `data` with --format json, else render(data)."""
    if getattr(args, "format", "table") == "json":
        print_json(data)
    else:
        render(data)


def error_line(message: str) -> None:
    print(f"kproto: {message}", file=sys.stderr, flush=True)


def progress(total: int, description: str):
    """A rich progress bar on stderr (a file upload's), or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
    return Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=_console(stderr=True), transient=False)
