"""A proposal is one atomic batch (issue #26): Kafka's controller appends a request's records with
scheduleAtomicAppend, so a CreateTopics commits all of a topic's TopicRecord + PartitionRecords
or none. Here, in the seeded simulation of raft/node.py, a proposal larger than a fetch
(max_fetch_entries) meets a leader crash just as its high watermark first moves into it."""
from raft import convert
from raft.messages import Entry
from tests.raft_sim import NO_FAULTS, Sim, run_seed

BATCH = 10          # a topic's records: more than one fetch holds
FETCH = 4           # max_fetch_entries


def _crash_leader_once_batch_commits(seed):
    sim = Sim(seed, voters=3, faults=NO_FAULTS, duration_ms=10 ** 9, snapshot_bytes=10 ** 9,
              propose_every_ms=10 ** 9, config={"max_fetch_entries": FETCH})
    while sim.now < 5000:
        sim.step()
        lead = sim._leader()
        if lead is not None and sim.nodes[lead].hwm > sim.nodes[lead].epoch_start_offset:
            break
    lead = sim._leader()
    assert lead is not None
    near, far = [i for i in sim.voter_ids if i != lead]
    # only one follower replicates, so the batch commits through its fetches alone
    sim.blocked = {(lead, far), (far, lead)}
    node = sim.nodes[lead]
    base = node.end_offset
    node.propose([b"topic-record"] + [b"partition-record-%d" % p for p in range(BATCH - 1)])
    sim._process(lead)
    while sim.now < 10000 and node.hwm <= base:
        sim.step()
    assert node.hwm > base, "the batch never started to commit"
    sim._crash(lead)
    sim.blocked = {(lead, near), (near, lead), (lead, far), (far, lead)}
    while sim.now < 20000:
        sim.step()
        new = sim._leader()
        if new is not None and new != lead and sim.nodes[new].hwm > sim.nodes[new].epoch_start_offset:
            break
    assert sim._leader() not in (None, lead)
    return sim


def test_a_batch_larger_than_a_fetch_commits_whole_across_a_leader_crash():
    for seed in range(5):
        sim = _crash_leader_once_batch_commits(seed)
        committed = [d for (_, d, control) in sim.committed if not control]
        topic = [d for d in committed if d == b"topic-record" or d.startswith(b"partition-record-")]
        # the old leader's high watermark had moved into the batch: all of it is committed, on
        # every node, and not the first fetches' worth of it
        assert len(topic) == BATCH, f"seed {seed}: {len(topic)} of the batch's {BATCH} records committed"


def test_batches_commit_whole_under_every_fault():
    # every third proposal is a batch of 25 entries (a fetch holds 20): the simulation fails a run
    # the moment a node's high watermark stops inside a batch
    totals = {}
    for seed in range(20):
        for k, v in run_seed(seed, voters=3, observers=1, batch_every=3).items():
            totals[k] = totals.get(k, 0) + v
    assert totals["crashes"] > 20 and totals["elections"] > 20 and totals["committed"] > 5000


def test_a_proposal_is_one_record_batch_on_disk_and_on_the_wire():
    entries = [Entry(0, 1, b"a", batch_end=False), Entry(1, 1, b"b", batch_end=False), Entry(2, 1, b"c"),
               Entry(3, 1, b"d")]
    buf = convert.entries_to_records(entries)
    assert convert.records_to_entries(buf) == tuple(entries)
    # a write torn (or a fetch cut short) inside the second batch loses it, never part of the first
    assert convert.records_to_entries(buf[:-5]) == tuple(entries[:3])
