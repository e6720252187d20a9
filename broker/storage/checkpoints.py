"""Kafka's small text files: offset checkpoints, leader-epoch checkpoint,
partition.metadata, meta.properties and the clean-shutdown marker.

Byte-for-byte what Kafka 3.9 writes (see the observations' segment-layout.md):
checkpoints are ``version\\ncount\\n`` followed by one line per entry, each
ending in a newline, replaced atomically (write a ``.tmp``, fsync, rename).
"""
from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be parsed."""


def atomic_write(path: str, data: bytes, sync: bool = True, tmp: str | None = None,
                 read_only: bool = False) -> None:
    """Replace ``path`` with ``data`` so a crash leaves the old or new file whole
    (``read_only``: mode 0400 before it appears, as Kafka freezes a snapshot)."""
    tmp = tmp or path + ".tmp"
    write_in_place(tmp, data, sync)
    if read_only:
        os.chmod(tmp, 0o400)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def write_in_place(path: str, data: bytes, sync: bool = True) -> None:
    """Write ``path`` directly, no temporary file and no rename: only for a file whose loss or
    torn contents after a crash cost nothing (it is written again, or rebuilt, on the next open).
    Saves a file creation and a rename per partition created (~1 ms on ext4)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    except OSError as exc:
        raise _named(exc, path) from None
    finally:
        os.close(fd)


def _named(exc: OSError, path: str) -> OSError:
    """``exc`` with the file's name: os.write and os.fsync errors carry none, and the log dir
    failure they report is found by it (broker/storage/dir_failure.py; without one it would
    fail the first log dir, whichever dir the file is in)."""
    if exc.filename is not None:
        return exc
    return type(exc)(exc.errno, exc.strerror, path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _named(exc, path) from None
    finally:
        os.close(fd)


def fsync_paths(paths) -> None:
    """fsync files and directories by name (a worker thread finishing the
    creation of a partition); one removed meanwhile needs no fsync."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _named(exc, path) from None
        finally:
            os.close(fd)


def touch(path: str) -> None:
    """Create an empty file if missing (Kafka's CheckpointFile constructor does)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)


def _format(entries: list[str]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines.extend(entries)
    return ("\n".join(lines) + "\n").encode()


def _parse(path: str) -> list[list[str]] | None:
    """Entry lines split on spaces; None when the file is missing or empty."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return None
    if not text:
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: malformed header") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {version}")
    entries = [line.split(" ") for line in lines[2:]]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


# ------------------------------------------------------ offsets per partition

def write_offsets_checkpoint(path: str, offsets: Mapping[tuple[str, int], int],
                             sync: bool = True) -> None:
    """``recovery-point-offset-checkpoint`` and friends: ``topic partition offset`` lines."""
    atomic_write(path, format_offsets(offsets), sync)


def format_offsets(offsets: Mapping[tuple[str, int], int]) -> bytes:
    return _format([f"{t} {p} {o}" for (t, p), o in offsets.items()])


def read_offsets_checkpoint(path: str) -> dict[tuple[str, int], int]:
    entries = _parse(path)
    if entries is None:
        return {}
    out = {}
    for entry in entries:
        if len(entry) != 3:
            raise CorruptCheckpointError(f"{path}: malformed line {' '.join(entry)!r}")
        try:
            out[(entry[0], int(entry[1]))] = int(entry[2])
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {' '.join(entry)!r}") from None
    return out


# ----------------------------------------------------- leader-epoch-checkpoint

def write_epoch_checkpoint(path: str, entries: Iterable[tuple[int, int]], sync: bool = True,
                           in_place: bool = False) -> None:
    """``leader-epoch-checkpoint``: ``epoch startOffset`` lines."""
    (write_in_place if in_place else atomic_write)(path, _format([f"{e} {o}" for e, o in entries]), sync)


def read_epoch_checkpoint(path: str) -> list[tuple[int, int]]:
    entries = _parse(path)
    if entries is None:
        return []
    out = []
    for entry in entries:
        if len(entry) != 2:
            raise CorruptCheckpointError(f"{path}: malformed line {' '.join(entry)!r}")
        try:
            out.append((int(entry[0]), int(entry[1])))
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {' '.join(entry)!r}") from None
    return out


# ----------------------------------------------------------- partition.metadata

def uuid_to_str(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


def uuid_from_str(s: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {s!r}")
    return uuid.UUID(bytes=raw)


def as_uuid(value) -> uuid.UUID:
    """Accept uuid.UUID, 16 raw bytes, Kafka's base64 form or the dashed form."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return uuid.UUID(bytes=bytes(value))
    if isinstance(value, str):
        return uuid.UUID(value) if len(value) == 36 else uuid_from_str(value)
    raise TypeError(f"not a topic id: {value!r}")


def write_partition_metadata(path: str, topic_id: uuid.UUID, sync: bool = True, in_place: bool = False) -> None:
    # no trailing newline, exactly as Kafka writes it (43 bytes)
    (write_in_place if in_place else atomic_write)(path, f"version: 0\ntopic_id: {uuid_to_str(topic_id)}".encode(),
                                                   sync)


def read_partition_metadata(path: str) -> uuid.UUID | None:
    try:
        with open(path, "rb") as f:
            text = f.read().decode()
    except FileNotFoundError:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CorruptCheckpointError(f"{path}: malformed partition metadata {text!r}")
    return uuid_from_str(fields["topic_id"])


# --------------------------------------------------------------- meta.properties

def _escape_property(s: str) -> str:
    out = []
    for ch in s:
        if ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


def write_meta_properties(path: str, properties: Mapping[str, object], sync: bool = True) -> None:
    """Java Properties.store format, as ``kafka-storage.sh format`` leaves it:
    an empty comment line, a date comment, then ``key=value`` lines."""
    date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", "#" + date]
    lines.extend(f"{_escape_property(str(k))}={_escape_property(str(v))}"
                 for k, v in properties.items())
    atomic_write(path, ("\n".join(lines) + "\n").encode(), sync)


def meta_properties(node_id: int, cluster_id: str, directory_id: str | None = None) -> dict[str, str]:
    """The four keys Kafka 3.9 writes, in its order."""
    if directory_id is None:
        directory_id = uuid_to_str(uuid.uuid4())
    return {"node.id": str(node_id), "directory.id": directory_id, "version": "1",
            "cluster.id": cluster_id}


def read_meta_properties(path: str) -> dict[str, str] | None:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("latin-1")
    except FileNotFoundError:
        return None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, value, i, escaped = [], None, 0, False
        target = key
        while i < len(line):
            ch = line[i]
            if escaped:
                target.append("\n" if ch == "n" else ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            elif value is None and ch in "=:":
                value = []
                target = value
            else:
                target.append(ch)
            i += 1
        out["".join(key).strip()] = "".join(value or []).strip()
    return out


# ------------------------------------------------------- clean-shutdown marker

def write_clean_shutdown(path: str, broker_epoch: int = -1) -> None:
    atomic_write(path, json.dumps({"version": 0, "brokerEpoch": broker_epoch},
                                  separators=(",", ":")).encode())


def read_clean_shutdown(path: str) -> int | None:
    """The broker epoch in the marker; None without a marker, -1 if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        return int(json.loads(data)["brokerEpoch"])
    except (ValueError, KeyError, TypeError):
        return -1
