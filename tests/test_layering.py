"""The import rule of docs/architecture.md ("Layering"), checked over the source as it is.

broker/ is a stack of rooms (sub-packages, plus broker/broker.py which assembles a node); a module
may import from its own room and from rooms below its own, never from a room above or beside it.
Every import counts: module level, inside functions, and under TYPE_CHECKING, since a deferred
import is still a dependency. Under the rooms: raft/ (consensus, pure) and kproto/ (the wire
protocol, no I/O); nothing shipped imports tools/.
"""
from __future__ import annotations

import ast
import functools
import os
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Top to bottom. Rooms on one line are beside each other: neither imports the other.
LAYERS = [
    ("launch",),
    ("broker",),            # broker/broker.py: assembles one node
    ("quorum",),
    ("server", "schema_registry"),
    ("handlers",),
    ("transactions", "share"),   # share: share groups (KIP-932)
    ("groups",),
    ("coordination",),
    ("controller",),
    ("replication",),
    ("tiered",),            # tiered storage (KIP-405): the remote log manager
    ("partitions", "metrics"),
    ("metadata",),
    ("security",),
    ("config",),
    ("console",),                  # the web console: a Kafka client (admin) of its own broker
    ("storage", "net", "admin"),   # admin: the admin CLI's Kafka client, kproto/ only
]
LEVEL = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
# What the packages under broker/ may import of each other (raft/ and kproto/ are below broker/).
BELOW_BROKER = {"kproto": set(), "raft": {"kproto"}}
# Standard-library modules that would give raft/ I/O, a clock or an event loop.
RAFT_FORBIDDEN = {"trio", "socket", "os", "time", "threading", "asyncio", "select", "selectors"}


def modules(root: str) -> dict[str, str]:
    """dotted module name -> file, for the packages broker, kproto and raft under `root`."""
    out = {}
    for top in ("broker", "kproto", "raft"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
                    out[name.removesuffix(".__init__")] = path
    return out


@functools.lru_cache(maxsize=None)   # (both whole-tree checks parse the same ~560 files)
def imports(name: str, path: str) -> list[tuple[int, str]]:
    """(line, imported module or module.attribute) for every import statement of a module."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def resolve(target: str, mods: dict[str, str]) -> str | None:
    """The module an import names (`pkg.mod.attr` -> `pkg.mod`), None outside these packages."""
    while target and target not in mods:
        target = target.rpartition(".")[0]
    return target or None


def room(module: str) -> str:
    """broker.X.* -> X (broker.broker -> broker); kproto.* -> kproto; raft.* -> raft."""
    parts = module.split(".")
    if parts[0] != "broker":
        return parts[0]
    return parts[1] if len(parts) > 1 else "broker"


def violations(root: str) -> list[str]:
    """Every import against the rule, as `file:line: what`."""
    mods = modules(root)
    out = []
    for name, path in sorted(mods.items()):
        src = room(name)
        rel = os.path.relpath(path, root)
        if name.startswith("broker.") and name.count(".") == 1 and name != "broker.broker" \
                and not path.endswith("__init__.py"):
            out.append(f"{rel}: a loose module at the top of broker/ (give it a room)")
        if src not in LEVEL and src not in BELOW_BROKER and name != "broker":
            out.append(f"{rel}: room {src!r} is not in LAYERS (tests/test_layering.py, docs/architecture.md)")
            continue
        for line, target in imports(name, path):
            top = target.split(".")[0]
            if top == "tools":
                out.append(f"{rel}:{line}: imports {target} (tools/ is not part of the package)")
                continue
            if src == "raft" and top in RAFT_FORBIDDEN:
                out.append(f"{rel}:{line}: raft/ imports {target} (consensus has no I/O, clock or loop)")
                continue
            dep = resolve(target, mods)
            if dep is None or dep == "broker":
                continue
            dst = room(dep)
            if dst == src:
                continue
            if src in BELOW_BROKER:
                if dst not in BELOW_BROKER[src]:
                    out.append(f"{rel}:{line}: {src}/ imports {dep} ({src}/ may import only "
                               f"{sorted(BELOW_BROKER[src]) or 'the standard library and its own modules'})")
                continue
            if dst in BELOW_BROKER:
                continue
            if dst not in LEVEL or LEVEL[dst] <= LEVEL[src]:
                where = "beside" if LEVEL.get(dst) == LEVEL[src] else "above"
                out.append(f"{rel}:{line}: {src} imports {dep}, a room {where} it")
    return out


def cycles(root: str) -> list[list[str]]:
    """Module import cycles (every import counts), as lists of module names."""
    mods = modules(root)
    graph = {name: sorted({d for _, t in imports(name, path) if (d := resolve(t, mods)) and d != name})
             for name, path in mods.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):   # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_import_points_down_the_layers():
    assert violations(ROOT) == []


def test_no_module_imports_itself_back_through_others():
    assert cycles(ROOT) == []


def test_every_room_says_what_it_owns():
    missing = []
    for r in LEVEL:
        init = os.path.join(ROOT, "broker", r, "__init__.py")
        if r == "broker":
            continue
        with open(init, encoding="utf-8") as f:
            doc = ast.get_docstring(ast.parse(f.read()))
        if not doc or len(doc) < 80:
            missing.append(r)
    assert missing == []


def test_the_rooms_on_disk_are_the_rooms_of_the_rule():
    on_disk = {d for d in os.listdir(os.path.join(ROOT, "broker"))
               if os.path.isfile(os.path.join(ROOT, "broker", d, "__init__.py"))}
    assert on_disk == set(LEVEL) - {"broker"}
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        doc = f.read()
    for r in on_disk:
        assert f"`broker/{r}/`" in doc, f"docs/architecture.md does not place broker/{r}/"


# The checker itself, on small trees that break the rule: each must be caught.

def _tree(tmp_path, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for pkg in ("broker", "kproto", "raft"):
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return str(tmp_path)


@pytest.mark.parametrize("files, expected", [
    # storage (bottom) reaching up into handlers, inside a function
    ({"broker/storage/__init__.py": "", "broker/handlers/__init__.py": "X = 1",
      "broker/storage/log.py": "def f():\n    from broker.handlers import X\n"},
     "broker/storage/log.py:2: storage imports broker.handlers, a room above it"),
    # two rooms beside each other
    ({"broker/net/__init__.py": "", "broker/storage/__init__.py": "",
      "broker/storage/a.py": "from broker.net import x\n", "broker/net/x.py": ""},
     "broker/storage/a.py:1: storage imports broker.net.x, a room beside it"),
    # a relative import under TYPE_CHECKING still counts
    ({"broker/config/__init__.py": "", "broker/quorum/__init__.py": "", "broker/quorum/shell.py": "",
      "broker/config/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..quorum import shell\n"},
     "broker/config/a.py:3: config imports broker.quorum.shell, a room above it"),
    ({"broker/cli.py": ""}, "broker/cli.py: a loose module at the top of broker/ (give it a room)"),
    ({"broker/launch/__init__.py": "", "broker/launch/embedded.py": "import tools.broker_process\n"},
     "broker/launch/embedded.py:1: imports tools.broker_process (tools/ is not part of the package)"),
    ({"kproto/api.py": "from broker.storage import log\n", "broker/storage/__init__.py": "",
      "broker/storage/log.py": ""},
     "kproto/api.py:1: kproto/ imports broker.storage.log (kproto/ may import only "
     "the standard library and its own modules)"),
    ({"raft/node.py": "import trio\n"},
     "raft/node.py:1: raft/ imports trio (consensus has no I/O, clock or loop)"),
    ({"broker/attic/__init__.py": ""},
     "broker/attic/__init__.py: room 'attic' is not in LAYERS (tests/test_layering.py, docs/architecture.md)"),
])
def test_the_checker_catches_a_broken_tree(tmp_path, files, expected):
    root = _tree(tmp_path, files)
    assert expected.replace("/", os.sep) in [v for v in violations(root)]


def test_the_checker_passes_a_tree_that_keeps_the_rule(tmp_path):
    root = _tree(tmp_path, {"broker/handlers/__init__.py": "from broker.storage import log\n",
                            "broker/storage/__init__.py": "", "broker/storage/log.py": "from kproto import api\n",
                            "kproto/api.py": "import struct\n", "raft/node.py": "from kproto import api\n"})
    assert violations(root) == []


def test_the_cycle_finder_catches_a_cycle(tmp_path):
    root = _tree(tmp_path, {"broker/storage/__init__.py": "",
                            "broker/storage/log.py": "from .cleaner import x\n",
                            "broker/storage/cleaner.py": "def f():\n    from .log import y\n"})
    assert cycles(root) == [["broker.storage.cleaner", "broker.storage.log"]]
