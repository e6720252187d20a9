"""CRC-32C (Castagnoli) of record batches and snapshots: the `crc32c` package's C function.

The package's `__init__` imports `importlib.metadata` only to set `__version__` (about a tenth of
the imports a broker starts with: email, zipfile, csv, ...; issue #26). The C extension module it
re-exports is loaded here straight from the package's folder without running that `__init__`;
anything unexpected (another layout, a pure-Python build) falls back to the package's import."""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os


def _extension():
    spec = importlib.util.find_spec("crc32c")       # finds the package without importing it
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if os.path.isfile(path):
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                module = importlib.util.module_from_spec(
                    importlib.util.spec_from_file_location("crc32c._crc32c", path, loader=loader))
                loader.exec_module(module)
                return module.crc32c
    return None


try:
    crc32c = _extension()
except (ImportError, OSError, AttributeError):
    crc32c = None
if crc32c is None:
    from crc32c import crc32c
