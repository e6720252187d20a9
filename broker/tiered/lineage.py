"""Which remote segments belong to a partition's history: its leader-epoch lineage (the leader
epoch cache, epochs and their start offsets) against a segment's leader epochs, pure.

After an unclean leader change the old leader may have copied a segment the new leader's log
never had (a divergent segment: its offsets hold other records). Such a segment must not count
as covering its offsets, neither for reads nor for where copying continues, or the new leader
would serve records that are not in its log and delete local segments it never copied. As
Kafka's RemoteLogManager: `within_lineage` is isRemoteSegmentWithinLeaderEpochs,
`highest_copied_offset` is findHighestRemoteOffset (with the metadata cache's
highestOffsetForEpoch)."""
from __future__ import annotations

import bisect

Epochs = list[tuple[int, int]]   # (epoch, start offset), both increasing


def with_records(epochs: Epochs) -> Epochs:
    """The epochs that hold records: an epoch starting where the next one starts holds none
    (Kafka's buildFilteredLeaderEpochMap)."""
    out = []
    for i, (epoch, start) in enumerate(epochs):
        if i + 1 < len(epochs) and epochs[i + 1][1] == start:
            continue
        out.append((epoch, start))
    return out


def prepare(lineage: Epochs) -> tuple[dict[int, int], list[int]]:
    """The lineage's epochs with records (epoch -> start offset) and their sorted epochs: what
    ``within_lineage`` derives from it, computed once for many segments."""
    lin = dict(with_records(lineage))
    return lin, sorted(lin)


def within_lineage(segment_epochs: Epochs, segment_end: int, lineage: Epochs, log_end: int,
                   prepared: tuple[dict[int, int], list[int]] | None = None) -> bool:
    """Whether a remote segment (its leader epochs and end offset) lies on ``lineage`` (the
    partition's leader epoch cache, down to its log start) below ``log_end``: every epoch of the
    segment is in the lineage with the same start offset (the segment's first epoch may start
    later: the segment starts in the middle of it; the lineage's first epoch may start later:
    the log start moved), and the segment ends before the lineage's next epoch begins."""
    seg = with_records(segment_epochs)
    lin, lin_epochs = prepared if prepared is not None else prepare(lineage)
    if not seg or not lin:
        return False
    last_epoch = seg[-1][0]
    if last_epoch < lin_epochs[0] or last_epoch > lin_epochs[-1]:
        return False
    # the segment's first epoch still in the lineage (older ones went with the log start)
    seg_from = [(e, o) for e, o in seg if e >= lin_epochs[0]]
    first_epoch = seg_from[0][0]
    for i, (epoch, start) in enumerate(seg_from):
        if epoch not in lin:
            return False
        k = bisect.bisect_right(lin_epochs, epoch)   # the lineage's next epoch, if any
        if epoch == first_epoch and lin_epochs[0] < epoch and start < lin[epoch]:
            return False   # the segment has this epoch's records before the lineage does
        if epoch == last_epoch:
            if k < len(lin_epochs) and segment_end > lin[lin_epochs[k]] - 1:
                return False   # the segment goes on past where the lineage's next epoch starts
        else:
            nxt = seg_from[i + 1]
            if k >= len(lin_epochs) or (lin_epochs[k], lin[lin_epochs[k]]) != nxt:
                return False   # the next epoch differs (in number or start)
    return segment_end < log_end


def highest_copied_offset(segments, lineage: Epochs, log_end: int) -> int:
    """The offset copying continues after: walking the lineage from its latest epoch back, the
    first epoch some copied segment holds gives the highest end offset of those segments, but
    no further than that epoch's end in the lineage (records beyond it are another leader's);
    -1 when no copied segment holds any epoch of the lineage. ``segments``: objects with
    ``leader_epochs`` and ``end_offset``."""
    for i in range(len(lineage) - 1, -1, -1):
        epoch = lineage[i][0]
        ends = [s.end_offset for s in segments if any(e == epoch for e, _o in s.leader_epochs)]
        if not ends:
            continue
        epoch_end = lineage[i + 1][1] if i + 1 < len(lineage) else log_end
        return min(max(ends), epoch_end - 1)
    return -1


def extended_below(lineage: Epochs, segments) -> Epochs:
    """``lineage`` extended below its first entry with the epochs of the copied segments there
    (``segments`` in start offset order, as PartitionView.copied()).

    A log whose leader epoch cache was trimmed to the local log start (by a kproto before it kept
    the epochs of tiered offsets) knows nothing of its older epochs; the segments' own epochs
    are then the only account of them (nothing to check them against, so they are taken as
    they are), and the first known epoch may have begun in one of them."""
    if not lineage:
        return lineage
    first_epoch, first_start = lineage[0]
    starts: dict[int, int] = {}
    for s in segments:
        if s.start_offset >= first_start:
            break   # (in start offset order: none below from here on)
        for epoch, start in s.leader_epochs:
            if epoch <= first_epoch and start < first_start:
                starts[epoch] = min(start, starts.get(epoch, start))
    if not starts:
        return lineage
    out: Epochs = []
    for epoch in sorted(starts):
        if epoch == first_epoch:
            first_start = starts[epoch]
            break
        if not out or starts[epoch] > out[-1][1]:
            out.append((epoch, starts[epoch]))
    out = [(e, o) for e, o in out if o < first_start]
    return out + [(first_epoch, first_start)] + lineage[1:]


def off_lineage_to_delete(segments, lineage: Epochs, log_start: int) -> list:
    """The remote segments off the lineage (``within_lineage`` false for them: another leader's
    history) that the leader deletes, as Kafka's RLMExpirationTask: those wholly below the log
    start offset, and those holding an epoch older than the lineage's earliest one (no epoch of
    the partition's history refers to them any more). ``segments``: the off-lineage segments,
    objects with ``leader_epochs`` and ``end_offset``. Kafka applies the earliest-epoch rule to
    every segment; here a segment on the lineage is left to retention and the log start rule,
    so no record above the log start is deleted by it."""
    earliest = lineage[0][0] if lineage else None
    return [s for s in segments if s.end_offset < log_start
            or (earliest is not None and any(e < earliest for e, _o in s.leader_epochs))]
