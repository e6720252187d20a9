"""`python -m tools.coord_bench --in-process` drives the two coordinators alone, on a stand-in for
the broker. The stand-in must keep up with what the coordinators ask of a broker: a commit that
failed (its stand-in partition lacked `is_leader`) or a transaction whose markers were never
appended would make the figures meaningless, so the run must succeed and append the markers."""
from __future__ import annotations

import tools.coord_bench as coord_bench


def test_the_in_process_coordinator_bench_commits_and_appends_markers(monkeypatch):
    markers = []
    monkeypatch.setattr(coord_bench._StandIn.producers, "write_marker",
                        staticmethod(lambda *args: markers.append(args) or 0))
    results = coord_bench.in_process(commits=20, txns=4)
    assert [r["workload"] for r in results] == ["offset commit, in process", "transaction, in process"]
    assert all(r["cpu_us_per_op"] > 0 for r in results)
    assert len(markers) == 4 * 5   # one COMMIT marker per transaction, five rounds
