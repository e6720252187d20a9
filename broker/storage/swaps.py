"""Files a crash left in the middle of a clean (``.cleaned``, ``.swap``, ``.deleted``), put
right before the segments of a log are opened, by Kafka's LogLoader rules. The cleaning
round that writes them is broker/storage/compaction.py."""
from __future__ import annotations

import logging
import os

from kproto.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH

from . import checkpoints as cp
from .files import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, offset_from_name
from .logconfig import LONG_MAX

# one logger for everything the cleaner does, as before the split (its lines keep their name)
log = logging.getLogger("broker.storage.cleaner")




def recover_interrupted_swaps(dir: str) -> None:
    """Kafka's LogLoader rules for files a crash left in the middle of a clean,
    run before the segments are opened:

    - ``.cleaned`` files are removed; so is every ``.swap`` file at or above
      the lowest ``.cleaned`` base offset (an incomplete operation);
    - the remaining ``.swap`` segments replace whatever they cover: every
      other file whose base offset lies in [lowest swap base, highest swap
      end) goes, then the ``.swap`` files lose their suffix.
    """
    names = os.listdir(dir)
    cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX) and _has_offset(n)]
    swaps = [n for n in names if n.endswith(SWAP_SUFFIX) and _has_offset(n)]
    if not cleaned and not swaps:
        return
    min_cleaned = min((offset_from_name(n) for n in cleaned), default=LONG_MAX)
    valid = []
    for name in swaps:
        if offset_from_name(name) >= min_cleaned:
            log.info("deleting invalid swap file %s (an unfinished clean at %d)",
                     os.path.join(dir, name), min_cleaned)
            remove_file(os.path.join(dir, name))
        else:
            valid.append(name)
    for name in cleaned:
        log.info("deleting stray cleaned file %s", os.path.join(dir, name))
        remove_file(os.path.join(dir, name))
    low, high = LONG_MAX, -1
    for name in valid:
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            base = offset_from_name(name)
            low = min(low, base)
            high = max(high, _next_offset_of_file(os.path.join(dir, name), base))
            log.info("found log file %s from an interrupted swap; completing it", os.path.join(dir, name))
    if high >= 0:
        for name in os.listdir(dir):
            path = os.path.join(dir, name)
            if name.endswith(SWAP_SUFFIX) or not _has_offset(name) or not os.path.isfile(path):
                continue
            if low <= offset_from_name(name) < high:
                log.info("deleting %s, replaced by a compacted segment", path)
                remove_file(path)
    for name in valid:
        path = os.path.join(dir, name)
        if os.path.exists(path):
            os.replace(path, path[:-len(SWAP_SUFFIX)])
    cp.fsync_dir(dir)


def _has_offset(name: str) -> bool:
    head = name.split(".", 1)[0]
    return head.isdigit() and "." in name


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _next_offset_of_file(path: str, base: int) -> int:
    """The offset after the last whole batch of a segment file (its base when empty)."""
    nxt = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position + HEADER_SIZE <= size:
            head = os.pread(f.fileno(), HEADER_SIZE, position)
            if len(head) < HEADER_SIZE:
                break
            fields = HEADER.unpack_from(head)
            length = fields[1]
            if length < MIN_BATCH_LENGTH or position + LOG_OVERHEAD + length > size:
                break
            nxt = fields[0] + fields[6] + 1
            position += LOG_OVERHEAD + length
    return nxt


# ===================================================================== settings
