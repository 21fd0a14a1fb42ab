"""The conclusions users act on, against expected values from outside the code under test.

Each test here guards a conclusion that was once unguarded (a one-line bug in any of them used to pass the
whole suite). The expected values are worked out by hand in the test, taken from a published
formula (nccl-tests doc/PERFORMANCE.md), or computed independently (an exact Mann-Whitney p-value by
enumerating every split of the pooled samples). Nothing here launches msrun.
"""

from __future__ import annotations

import itertools
import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import analyzers
from analyzers.analyses.breakdown import reconcile
from analyzers.analyses.collectives import busbw_factor, comm_op_stats
from analyzers.analyses.slow_ranks import find_slow_ranks
from perfbench.regress.check import decide_metric
from perfbench.views.results import summarize
from tests.support import write_yaml

# ---- 1. throughput of a multi-rank run: sum of samples over ranks / the slowest rank's step time ------------


def _steps(rows):
    return pd.DataFrame(rows, columns=["rank", "step", "samples", "step_time_s", "profiled"])


def workload_metrics(steps: pd.DataFrame, warmup_steps: int) -> dict:
    """The run record's metrics of a run captured without the profiler (the path every sweep run takes)."""
    cfg = {"world_size": int(steps["rank"].nunique()), "train": {"warmup_steps": warmup_steps}}
    return analyzers.analyze(None, workload_steps=steps, config=cfg).summary


def test_multi_rank_throughput_is_summed_samples_over_slowest_rank():
    # 2 ranks x 8 samples; rank 1 is the slow one. Step 0 is warm-up (excluded).
    slow = {0: 9.0, 1: 0.20, 2: 0.25, 3: 0.20, 4: 0.40}
    rows = []
    for step, t1 in slow.items():
        rows.append((0, step, 8, 0.10, False))
        rows.append((1, step, 8, t1, False))
    m = workload_metrics(_steps(rows), warmup_steps=1)
    # per step: 16 / max(0.10, t1) = 80, 64, 80, 40 samples/s; median of four = (64 + 80) / 2
    assert m["throughput"] == pytest.approx(72.0, rel=1e-12)
    assert m["step_time_s"] == pytest.approx(0.225, rel=1e-12)  # median of 0.20, 0.25, 0.20, 0.40
    assert m["samples_per_step"] == 16
    assert m["measured_steps"] == 4


def test_pipeline_throughput_counts_only_last_stage_samples():
    # 2 stages: the first stage reports 0 samples (contract), the last stage 8; both take 0.5 s
    rows = [(r, s, 8 if r == 1 else 0, 0.5, False) for s in range(4) for r in (0, 1)]
    assert workload_metrics(_steps(rows), warmup_steps=1)["throughput"] == pytest.approx(16.0)


def test_throughput_ignores_steps_a_rank_did_not_finish():
    # rank 1 crashed in step 3: that step is not a whole step of the run
    rows = [(r, s, 4, 0.5, False) for s in range(3) for r in (0, 1)] + [(0, 3, 4, 0.05, False)]
    m = workload_metrics(_steps(rows), warmup_steps=0)
    assert m["throughput"] == pytest.approx(16.0) and m["measured_steps"] == 3


# ---- 2. scaling efficiency: against the 1-rank run with the same configuration --------------------------------


def _rec(run_id, ws, tp, key, status="ok", repeat=0):
    return {
        "run_id": run_id,
        "sweep_id": "s",
        "source": "sweep",
        "status": status,
        "error": None,
        "settings": {"workload": "resnet50", "world_size": ws, "repeat": repeat},
        "config_key": key,
        "metrics": {"throughput": tp},
    }


def test_scaling_efficiency_uses_the_one_rank_run_of_the_same_configuration():
    # two configurations (A: no compression, B: fp16) on 1 and 2 ranks; B's 1-rank run is twice as fast
    recs = [
        _rec("a1", 1, 100.0, "A"),
        _rec("a1r", 1, 140.0, "A", repeat=1),
        _rec("a1s", 1, 60.0, "A", repeat=2),
        _rec("b1", 1, 200.0, "B"),
        _rec("a2", 2, 200.0, "A"),
        _rec("b2", 2, 300.0, "B"),
        _rec("c2", 2, 100.0, "C"),  # no 1-rank run of configuration C: unknown, not 0 and not another's
        _rec("a2f", 2, 50.0, "A", status="failed"),
        _rec("bx1", 1, 999.0, "B", status="failed"),  # a failed 1-rank run is no baseline
    ]
    eff = {r["run_id"]: r["scaling_efficiency"] for r in summarize(recs)}
    # A: baseline = median(100, 140, 60) = 100 -> 200 / (2 x 100) = 1.0 ; B: 300 / (2 x 200) = 0.75
    assert eff["a2"] == pytest.approx(1.0, rel=1e-12)
    assert eff["b2"] == pytest.approx(0.75, rel=1e-12)
    assert eff["a1"] == pytest.approx(1.0) and eff["a1r"] == pytest.approx(1.4) and eff["b1"] == pytest.approx(1.0)
    assert eff["c2"] is None and eff["a2f"] is None and eff["bx1"] is None


def cli(capsys, *args) -> tuple[int, str, str]:
    """The real `perfbench` command line, in this process (fast): (exit code, stdout, stderr)."""
    from perfbench.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_scaling_efficiency_through_ls_json(tmp_path, capsys):
    """The same closed-form case through the store and `perfbench ls --json` (what users read)."""
    from perfbench.store import Store

    store = Store(tmp_path / "results")
    for r in (
        _rec("s-a1", 1, 100.0, "A"),
        _rec("s-b1", 1, 200.0, "B"),
        _rec("s-a2", 2, 200.0, "A"),
        _rec("s-b2", 2, 300.0, "B"),
    ):
        store.write_run(r)
    code, out, err = cli(capsys, "ls", "--results", tmp_path / "results", "--json")
    assert code == 0, err
    rows = json.loads(out)
    rows = rows["runs"] if isinstance(rows, dict) else rows
    eff = {r["run_id"]: r["scaling_efficiency"] for r in rows}
    assert eff["s-a2"] == pytest.approx(1.0) and eff["s-b2"] == pytest.approx(0.75)


# ---- 3. `perfbench check` needs statistical significance ---------------------------------------------------------


def exact_mann_whitney_p(a, b) -> float:
    """Two-sided exact Mann-Whitney p-value by enumerating every split of the pooled samples (no ties):
    p = min(1, 2 x min(P[U <= u], P[U >= u])), U = #pairs (b_j > a_i)."""
    pooled = list(a) + list(b)
    u_obs = sum(bj > ai for ai in a for bj in b)
    us = []
    for idx in itertools.combinations(range(len(pooled)), len(b)):
        bb = [pooled[i] for i in idx]
        aa = [pooled[i] for i in range(len(pooled)) if i not in idx]
        us.append(sum(y > x for x in aa for y in bb))
    us = np.array(us)
    return min(1.0, 2 * min(float((us <= u_obs).mean()), float((us >= u_obs).mean())))


def _entries(values, metric="step_time_s"):
    return [{"samples": {metric: list(map(float, v))}, "metrics": {}} for v in values]


NOISY_BASE = [0.60, 0.80, 0.95, 1.05, 1.40, 1.70]  # median 1.00
NOISY_CUR = [0.65, 0.98, 1.20, 1.26, 1.45, 1.75]  # median 1.23: +23%, inside the spread


def test_exact_p_value_by_enumeration_is_the_textbook_one():
    # 3 vs 3, completely separated: only 1 of C(6,3) = 20 splits is as extreme on each side -> p = 2/20
    assert exact_mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert exact_mann_whitney_p(NOISY_BASE, NOISY_CUR) == pytest.approx(448 / 924)  # 0.4848...


def test_noisy_23_percent_slowdown_is_not_a_regression():
    p = exact_mann_whitney_p(NOISY_BASE, NOISY_CUR)
    assert 0.45 < p < 0.5
    r = decide_metric("step_time_s", _entries([NOISY_BASE]), _entries([NOISY_CUR]), 0.05, 0.05)
    assert r["change"] == pytest.approx(0.23, rel=1e-9)  # the effect is well over the 5% threshold ...
    assert r["p_value"] == pytest.approx(p, abs=0.02)  # ... but p ~ 0.48 says it may be noise
    assert r["verdict"] == "unchanged"


def test_separated_23_percent_slowdown_is_a_regression():
    base = [0.96, 0.98, 0.99, 1.00, 1.01, 1.02]
    cur = [x * 1.23 for x in base]
    p = exact_mann_whitney_p(base, cur)
    assert p == pytest.approx(2 / 924)
    r = decide_metric("step_time_s", _entries([base]), _entries([cur]), 0.05, 0.05)
    assert r["p_value"] == pytest.approx(p, abs=1e-3)
    assert r["verdict"] == "regression"
    # and the same samples the other way round are an improvement
    assert decide_metric("step_time_s", _entries([cur]), _entries([base]), 0.05, 0.05)["verdict"] == "improvement"


# ---- 4. comm_share: higher is worse ---------------------------------------------------------------------------


def test_comm_share_rising_from_10_to_30_percent_is_a_regression():
    base = [0.09, 0.10, 0.11, 0.10, 0.095, 0.105]
    cur = [0.29, 0.30, 0.31, 0.30, 0.295, 0.305]
    r = decide_metric("comm_share", _entries([base], "comm_share"), _entries([cur], "comm_share"), 0.05, 0.05)
    assert r["verdict"] == "regression"
    assert r["change"] == pytest.approx(0.20, abs=1e-9)  # shares change in points: 10% -> 30% is +20 points
    back = decide_metric("comm_share", _entries([cur], "comm_share"), _entries([base], "comm_share"), 0.05, 0.05)
    assert back["verdict"] == "improvement"


def test_catalogue_directions_of_the_gated_metrics():
    from analyzers.catalogue import METRICS

    # what a user means by "better", stated here independently of the code
    expected = {
        "throughput": "higher",
        "step_time_s": "lower",
        "comm_share": "lower",
        "communication_not_overlapped_s": "lower",
        "scaling_efficiency": "higher",
        "kernel_utilization": "higher",
        "free_s": "lower",
        "bubble_fraction": "lower",
        "expert_load_cv": "lower",
    }
    assert {k: METRICS[k].better for k in expected} == expected


# ---- 5. slow-rank floor: the top rank's lateness against the group's median -------------------------------------


def _comm_ops(lateness_by_instance, elapse_ms=10.0):
    """One all-reduce per step; lateness_r = wait_max - wait_r, so wait_r = 5 - lateness_r."""
    rows = []
    for step, lat in enumerate(lateness_by_instance):
        for rank, late in enumerate(lat):
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "op_name": "hcom_allReduce_1",
                    "group": "g",
                    "wait_ms": 5.0 - late,
                    "start_us": 1000.0 * step + late * 1000,
                    "elapse_ms": elapse_ms,
                }
            )
    return pd.DataFrame(rows)


def _group_rows(res):
    return res[res["scope"] == "group"].set_index("rank")


def test_rank_late_by_less_than_the_floor_above_the_median_is_not_slow():
    # ranks 0-2 take turns arriving first; rank 3 is always last. Mean lateness: 1.0, 1.0, 1.0, 1.8 ms.
    # Dixon Q = (1.8 - 1.0) / (1.8 - 1.0) = 1 > Q95(4) = 0.829: an outlier, but only 0.8 ms later than a
    # typical rank, below the floor of 10% of the 10 ms collective (1.0 ms). Against 0 it would be 1.8 ms.
    lat = [[0.0, 1.5, 1.5, 1.8], [1.5, 0.0, 1.5, 1.8], [1.5, 1.5, 0.0, 1.8]]
    g = _group_rows(find_slow_ranks(_comm_ops(lat)))
    assert list(g["mean_lateness_ms"]) == pytest.approx([1.0, 1.0, 1.0, 1.8])
    assert g.loc[3, "test"] == "dixon_q" and g.loc[3, "statistic"] == pytest.approx(1.0)
    assert not g["slow"].any()


def test_rank_late_by_more_than_the_floor_above_the_median_is_slow():
    lat = [[0.0, 1.5, 1.5, 2.6], [1.5, 0.0, 1.5, 2.6], [1.5, 1.5, 0.0, 2.6]]  # 1.6 ms over the median >= 1.0
    g = _group_rows(find_slow_ranks(_comm_ops(lat)))
    assert list(g["slow"]) == [False, False, False, True]


# ---- 6. bus bandwidth factors: nccl-tests doc/PERFORMANCE.md ----------------------------------------------------

# op type -> busbw / algbw as a function of n, as published (nccl-tests, doc/PERFORMANCE.md, "Bus bandwidth")
NCCL_TESTS = {
    "allreduce": lambda n: Fraction(2 * (n - 1), n),
    "reducescatter": lambda n: Fraction(n - 1, n),
    "allgather": lambda n: Fraction(n - 1, n),
    "alltoall": lambda n: Fraction(n - 1, n),
    "broadcast": lambda n: Fraction(1),
    "reduce": lambda n: Fraction(1),
    "send": lambda n: Fraction(1),  # sendrecv: one transfer, busbw = algbw
    "recv": lambda n: Fraction(1),
}


@pytest.mark.parametrize("op", sorted(NCCL_TESTS))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16])
def test_busbw_factor_table(op, n):
    assert busbw_factor(op, n) == pytest.approx(float(NCCL_TESTS[op](n)), rel=1e-15)


def test_busbw_of_comm_ops_from_size_and_time():
    # 1e9 bytes in 100 ms on 4 ranks: algbw = 10 GB/s; busbw = 10 x factor
    ops = pd.DataFrame(
        [
            {
                "op_type": t,
                "group_size": 4,
                "size_bytes": 1e9,
                "elapse_ms": 100.0,
                "wait_ms": 20.0,
                "transit_ms": 80.0,
                "synchronization_ms": 0.0,
            }
            for t in NCCL_TESTS
        ]
    )
    out = comm_op_stats(ops).set_index("op_type")
    for t, f in NCCL_TESTS.items():
        assert out.loc[t, "algbw_gbps"] == pytest.approx(10.0)
        assert out.loc[t, "busbw_gbps"] == pytest.approx(10.0 * float(f(4)))
        assert out.loc[t, "wait_ratio"] == pytest.approx(0.2)  # 20 / (20 + 80)
    assert np.isnan(busbw_factor("allreduce", None)) and np.isnan(busbw_factor("unknownop", 4))


# ---- 7. the breakdown reconciliation compares ours with the profiler's ------------------------------------------


def test_reconciliation_shows_a_5_ms_difference():
    ours = pd.DataFrame(
        [
            {
                "rank": 0,
                "step": 1,
                "step_us": 200_000.0,
                "computing_us": 105_000.0,
                "communication_not_overlapped_us": 60_000.0,
                "free_us": 35_000.0,
            }
        ]
    )
    profiler = pd.DataFrame(
        [
            {
                "rank": 0,
                "step": 1,
                "computing_us": 100_000.0,
                "communication_not_overlapped_us": 60_000.0,
                "free_us": 40_000.0,
            }
        ]
    )
    rec = reconcile(ours, profiler).set_index("metric")
    assert rec.loc["computing", "computed_us"] == 105_000.0 and rec.loc["computing", "reference_us"] == 100_000.0
    assert rec.loc["computing", "diff_us"] == pytest.approx(5_000.0)
    assert rec.loc["computing", "rel_diff"] == pytest.approx(0.025)  # 5 ms of a 200 ms step
    assert rec.loc["free", "diff_us"] == pytest.approx(-5_000.0)
    assert rec.loc["communication_not_overlapped", "diff_us"] == 0.0


# ---- 8. config boundaries, through the CLI ------------------------------------------------------------------------


def _sweep(capsys, tmp_path, name, train, profile):
    cfg = {"name": name, "workload": "resnet50", "train": train, "profile": profile}
    return cli(
        capsys, "sweep", write_yaml(tmp_path / f"{name}.yaml", cfg), "--dry-run", "--results", tmp_path / "results"
    )


@pytest.mark.parametrize(
    "name,train,profile,ok",
    [
        ("warm-eq-steps-noprof", {"steps": 5, "warmup_steps": 5}, {"enabled": False}, False),
        ("warm-below-steps-noprof", {"steps": 5, "warmup_steps": 4}, {"enabled": False}, True),
        ("prof-fits-exactly", {"steps": 6, "warmup_steps": 2}, {"enabled": True, "steps": 4}, True),
        ("prof-one-too-many", {"steps": 6, "warmup_steps": 2}, {"enabled": True, "steps": 5}, False),
    ],
)
def test_config_boundaries(tmp_path, capsys, name, train, profile, ok):
    code, out, err = _sweep(capsys, tmp_path, name, train, profile)
    if ok:
        assert code == 0, err
    else:
        assert code == 2, (code, out[-500:], err[-500:])
        assert err.startswith("perfbench: error:") and len(err.strip().splitlines()) == 1, err
        key = "train.warmup_steps" if not profile.get("enabled") else "profile.steps"
        assert key in err, err


# ---- the run record's workload metrics at their edges (kills `make mutation` survivors)
# -------------------------------


def test_profiled_steps_stay_out_of_throughput_and_give_the_overhead():
    rows = []
    for step in range(7):  # step 0 warm-up; steps 1-2 profiled (0.5 s), steps 3-6 not (0.4 s)
        t = 0.5 if step in (1, 2) else 0.4
        for r in (0, 1):
            rows.append(
                {
                    "rank": r,
                    "step": step,
                    "samples": 4,
                    "step_time_s": t,
                    "profiled": step in (1, 2),
                    "dropped_tokens": 1.0,
                    "loss": 2.0 - 0.1 * step,
                }
            )
    m = workload_metrics(pd.DataFrame(rows), warmup_steps=1)
    assert m["throughput"] == pytest.approx(8 / 0.4) and m["step_time_s"] == pytest.approx(0.4)
    assert m["measured_steps"] == 4
    assert m["profiled_step_time_s"] == pytest.approx(0.5) and m["profiler_overhead"] == pytest.approx(0.25)
    assert m["dropped_tokens_per_step"] == pytest.approx(2.0)  # summed over the ranks
    assert m["loss_first"] == pytest.approx(2.0) and m["loss_last"] == pytest.approx(1.4)


def test_one_rank_dropped_tokens_and_records_without_step_times():
    rows = [{"rank": 0, "step": s, "samples": 4, "step_time_s": 0.5, "dropped_tokens": 3.0} for s in range(3)]
    assert workload_metrics(pd.DataFrame(rows), warmup_steps=1)["dropped_tokens_per_step"] == 3.0
    bare = pd.DataFrame([{"rank": 0, "step": s, "samples": 4} for s in range(3)])  # no step_time_s: unknown
    m = workload_metrics(bare, warmup_steps=1)
    assert m.get("throughput") is None and m.get("step_time_s") is None
