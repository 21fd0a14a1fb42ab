"""A many-rank cluster reads the same, rank for rank, as its ranks read one at a time.

The cluster (16 ranks, two data-parallel groups of 8) is built in tmp from set B level1's two real ranks by
the benchmark's own generator (bench/bench_cluster_vs_msprof.py `make_synth`: rank ids, group names,
parallel_group_info and group-local link numbers rewritten; one planted slow rank, one planted slow link).
A cluster is read with one table per kind across ranks, in worker processes that send back packed chunks
(analyzers/parsers/load.py); a single rank through the same readers alone. Expected values come from the files
(the source rank's step_trace_time.csv and communication.json, the generator's group layout and plants).
"""

from __future__ import annotations

import csv
import importlib.util
import json

import pandas as pd
import pytest

import analyzers
from tests.support import ROOT, fixture_path, run_perfbench

B1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")
N = 16


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_cluster_vs_msprof", ROOT / "bench" / "bench_cluster_vs_msprof.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.FIX = fixture_path(*B1).parent
    return mod


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    bench = _bench()
    d = tmp_path_factory.mktemp("cluster") / f"synth-{N}"
    bench.make_synth(N, d)
    return d, bench


def _rows(df: pd.DataFrame, rank: int) -> pd.DataFrame:
    return df[df["rank"] == rank].reset_index(drop=True)


def test_cluster_tables_are_the_ranks_read_alone(cluster):
    d, _ = cluster
    in_process = analyzers.load_profile(d, workers=1, kernels="none")
    parallel = analyzers.load_profile(d, workers=2, kernels="none")
    assert sorted(parallel.ranks["rank"]) == list(range(N))
    for name in ("ranks", "comm_ops", "comm_bandwidth", "links", "reference_breakdown"):
        pd.testing.assert_frame_equal(getattr(parallel, name), getattr(in_process, name), check_exact=True)
    for r in range(N):
        alone = analyzers.load_profile(d / f"rank{r}_ascend_pt", kernels="none")
        for name in ("ranks", "comm_ops", "comm_bandwidth", "links", "reference_breakdown"):
            got, want = _rows(getattr(parallel, name), r), getattr(alone, name).reset_index(drop=True)
            assert len(want), (r, name)
            if name == "ranks":  # a rank alone knows no world size but its own (the profiler wrote none here)
                assert got["world_size"].tolist() == [N] and want["world_size"].tolist() == [1]
                got, want = got.drop(columns="world_size"), want.drop(columns="world_size")
            pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"rank {r} {name}")


def test_summary_mode_pairs_each_rank_with_its_own_memory_files(cluster):
    """In summary mode each rank's memory numbers come from its own memory files, also when worker processes send
    back packed chunks: rank r (made from source rank r % 2) has the peaks of that source's memory_record.csv."""
    from analyzers.analyses.memory import rank_summaries

    d, _ = cluster
    src = fixture_path(*B1)
    want = {}
    for s in (0, 1):
        with open(src / f"rank{s}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv", newline="") as fh:
            app = [float(row["Total Reserved(MB)"]) for row in csv.DictReader(fh) if row["Component"] == "APP"]
        want[s] = max(app) * 1048576
    assert want[0] != want[1]  # the two source ranks differ, so a rank paired with another's files shows
    for workers in (1, 2):
        p = analyzers.load_profile(d, workers=workers, kernels="none", read_trace=False, detail="summary")
        got = rank_summaries(p)
        assert {r: got[r]["peaks"]["peak_process_bytes"] for r in range(N)} == {r: want[r % 2] for r in range(N)}


def test_cluster_json_reports_each_rank_from_its_files(cluster):
    d, bench = cluster
    r = run_perfbench("analyze", d, "--json", "--no-store", "--workers", "2", "--progress", "always")
    doc = json.loads(r.stdout)  # progress goes to stderr only: stdout is one JSON document
    assert f"ranks parsed {N}/{N}" in r.stderr
    assert [x["rank"] for x in doc["ranks"]] == list(range(N))
    src = fixture_path(*B1)
    steps, comm = {}, {}
    for s in (0, 1):
        with open(src / f"rank{s}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as fh:
            steps[s] = next(csv.DictReader(fh))
        comm[s] = json.loads((src / f"rank{s}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    slow_rank, slow_link = bench.planted(N)
    for rank in doc["ranks"]:
        r_, s = rank["rank"], rank["rank"] % 2
        (st,) = rank["steps"]
        assert st["step"] == 50
        assert st["computing_us"] == float(steps[s]["Computing"]) and st["free_us"] == float(steps[s]["Free"])
        assert st["step_us"] == float(steps[s]["Stage"]) + float(steps[s]["Bubble"])
        # every rank's collectives, in its own DP group, with the waits of its source rank (plus the plant's delay)
        ops = {c["op_name"]: c for c in doc["communication"] if c["rank"] == r_}
        want = {
            k.partition("@")[0]: v["Communication Time Info"]
            for k, v in comm[s]["step50"]["collective"].items()
            if k != "Total Op Info"
        }
        assert set(ops) == set(want)
        delayed = r_ // 8 == slow_rank // 8 and r_ != slow_rank
        for name, c in ops.items():
            assert c["group"] == bench._group_id(r_ // 8) and c["group_size"] == 8
            assert c["wait_ms"] == pytest.approx(
                want[name]["Wait Time(ms)"] + (bench.SLOW_RANK_DELAY_MS if delayed else 0)
            )
            assert c["transit_ms"] == want[name]["Transit Time(ms)"]
        # links in global ranks: a rank reports the links from itself to the ranks of its group
        links = [x for x in doc["links"] if x["rank"] == r_]
        assert links and {x["src"] for x in links} == {r_}
        assert {x["dst"] for x in links} == set(range(r_ // 8 * 8, r_ // 8 * 8 + 8))
    assert sorted({x["rank"] for x in doc["slow_ranks"] if x["slow"] and x["scope"] == "group"}) == [slow_rank]
    assert [(x["src"], x["dst"]) for x in doc["slow_links"] if x["slow"] and x["kind"] == "link"] == [slow_link]
