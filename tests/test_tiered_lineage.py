"""Which remote segments are on a partition's leader-epoch lineage (broker/tiered/lineage.py, pure):
a divergent segment an old leader copied is neither read nor counted as copied, as Kafka's
RemoteLogManager.isRemoteSegmentWithinLeaderEpochs and findHighestRemoteOffset decide."""
from __future__ import annotations

from dataclasses import dataclass

from broker.tiered.lineage import (
    extended_below, highest_copied_offset, off_lineage_to_delete, with_records, within_lineage,
)


@dataclass
class Seg:
    start_offset: int
    end_offset: int
    leader_epochs: list


def test_segments_on_the_lineage_are_accepted():
    lineage = [(0, 0), (1, 100), (3, 250)]
    assert within_lineage([(0, 0)], 99, lineage, 400)
    assert within_lineage([(0, 50), (1, 100)], 149, lineage, 400)             # starts inside epoch 0
    assert within_lineage([(1, 120), (3, 250)], 299, lineage, 400)
    assert within_lineage([(0, 0), (1, 100)], 120, lineage, 400)
    # the log start moved past epoch 0: a segment starting in it still counts (Kafka's example)
    assert within_lineage([(0, 14), (1, 100)], 150, [(1, 51), (3, 250)], 400)


def test_a_divergent_old_leader_segment_is_refused():
    # the new leader's lineage: epoch 1 ended at 150, epoch 2 began there (unclean election)
    lineage = [(0, 0), (1, 100), (2, 150)]
    # the old leader went on writing epoch 1 up to 199 and copied it
    assert not within_lineage([(1, 100)], 199, lineage, 400)
    # an epoch the new leader never had
    assert not within_lineage([(1, 100), (4, 160)], 199, lineage, 400)
    # epoch 2 starting elsewhere than in the lineage
    assert not within_lineage([(1, 100), (2, 170)], 199, lineage, 400)
    # the first epoch's records before the lineage has that epoch begin
    assert not within_lineage([(1, 80), (2, 150)], 199, lineage, 400)
    # an epoch newer than any the log knows, or one older than its first
    assert not within_lineage([(5, 150)], 199, lineage, 400)
    assert not within_lineage([(0, 0)], 20, [(1, 100), (2, 150)], 400)
    # beyond the log end
    assert not within_lineage([(2, 150)], 400, lineage, 400)


def test_epochs_without_records_are_ignored():
    assert with_records([(0, 0), (1, 10), (2, 10), (3, 20)]) == [(0, 0), (2, 10), (3, 20)]
    # epoch 1 of the lineage holds no records: a segment going from epoch 0 to 2 is on it
    assert within_lineage([(0, 0), (2, 10)], 19, [(0, 0), (1, 10), (2, 10), (3, 20)], 100)


def test_copying_continues_after_the_highest_offset_on_the_lineage():
    lineage = [(0, 0), (1, 100), (2, 150)]
    ours = [Seg(0, 99, [(0, 0)]), Seg(100, 139, [(1, 100)])]
    assert highest_copied_offset(ours, lineage, 300) == 139
    # the old leader's divergent 100-199 of epoch 1: copying goes on at 150, where epoch 2 began
    divergent = ours + [Seg(140, 199, [(1, 140)])]
    assert highest_copied_offset(divergent, lineage, 300) == 149
    # once the new leader copied its own segment holding epoch 2, that one counts
    assert highest_copied_offset(divergent + [Seg(140, 219, [(1, 140), (2, 150)])], lineage, 300) == 219
    assert highest_copied_offset([], lineage, 300) == -1
    assert highest_copied_offset([Seg(0, 50, [(7, 0)])], lineage, 300) == -1


def test_a_lineage_trimmed_to_the_local_start_is_extended_with_the_remote_epochs():
    segs = [Seg(0, 99, [(0, 0)]), Seg(100, 199, [(0, 100), (2, 120)]), Seg(200, 299, [(2, 200)])]
    assert extended_below([(2, 250), (3, 400)], segs) == [(0, 0), (2, 120), (3, 400)]
    assert within_lineage([(0, 100), (2, 120)], 199, extended_below([(2, 250), (3, 400)], segs), 500)
    assert extended_below([(0, 0), (2, 120)], segs) == [(0, 0), (2, 120)]


def test_off_lineage_segments_go_below_the_log_start_or_older_than_the_earliest_epoch():
    """Kafka's RLMExpirationTask: another leader's segment is deleted once wholly below the log
    start, or when it holds an epoch older than the lineage's earliest (unreferenced)."""
    lineage = [(2, 300), (4, 500)]                       # the log starts at 300 in epoch 2
    below = Seg(200, 299, [(3, 200)])
    unreferenced = Seg(350, 420, [(1, 350)])
    kept = Seg(420, 480, [(3, 420)])                     # epoch 3: between 2 and 4, above the start
    assert off_lineage_to_delete([below, unreferenced, kept], lineage, 300) == [below, unreferenced]
    assert off_lineage_to_delete([kept], [], 0) == []
