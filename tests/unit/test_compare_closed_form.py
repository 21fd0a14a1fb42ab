"""`perfbench compare` on two hand-built runs in a store (no msrun): every number of the comparison worked
out by hand from the tables written here (docs/check.md and the perfbench.regress.compare docstring give the rules)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from scipy import stats

from perfbench.regress.compare import compare_runs, settings_diff, step_samples
from perfbench.errors import UserError
from perfbench.store import Store
from tests.unit.test_conclusions import exact_mann_whitney_p


def _record(rid, ws, metrics, config=None, status="ok"):
    cfg = {"train": {"warmup_steps": 1, "batch_size": 4}, "run_id": rid, "output_dir": f"/x/{rid}", "repeat": 0}
    cfg.update(config or {})
    return {
        "run_id": rid,
        "sweep_id": "s",
        "source": "sweep",
        "status": status,
        "error": None,
        "settings": {"workload": "resnet50", "world_size": ws, "repeat": 0},
        "config": cfg,
        "metrics": metrics,
    }


def _workload(slow_times):
    """2 ranks x 4 samples; rank 0 always 0.1 s, rank 1 `slow_times` (step 0 is warm-up)."""
    rows = []
    for step, t in enumerate(slow_times):
        rows += [
            {"rank": 0, "step": step, "samples": 4, "step_time_s": 0.1},
            {"rank": 1, "step": step, "samples": 4, "step_time_s": t},
        ]
    return pd.DataFrame(rows)


def _breakdown(rows):
    return pd.DataFrame(
        rows,
        columns=[
            "rank",
            "step",
            "step_us",
            "computing_us",
            "communication_us",
            "communication_not_overlapped_us",
            "overlapped_us",
            "free_us",
        ],
    )


@pytest.fixture
def store(tmp_path):
    st = Store(tmp_path / "results")
    st.write_run(
        _record(
            "a",
            2,
            {"throughput": 32.0, "comm_share": None, "step_time_s": 0.25},
            config={"parallel": {"comm_fusion": 0}},
        )
    )
    st.write_run(
        _record(
            "b",
            2,
            {"throughput": 64.0, "comm_share": 0.2, "step_time_s": 0.125},
            config={"parallel": {"comm_fusion": 4}},
        )
    )
    st.write_table("a", "workload_steps", _workload([9.0, 0.2, 0.3, 0.25]))
    st.write_table("b", "workload_steps", _workload([9.0, 0.1, 0.15, 0.125]).assign(step=lambda d: d["step"]))
    # step 0 is warm-up and must not count; steps 1-2 on two ranks
    st.write_table(
        "a",
        "step_breakdown",
        _breakdown(
            [
                (0, 0, 9e6, 0, 9e6, 9e6, 0, 0),
                (0, 1, 200_000, 100_000, 50_000, 40_000, 10_000, 60_000),
                (1, 1, 200_000, 120_000, 30_000, 30_000, 0, 50_000),
                (0, 2, 100_000, 60_000, 20_000, 20_000, 0, 20_000),
                (1, 2, 100_000, 50_000, 40_000, 20_000, 20_000, 30_000),
            ]
        ),
    )
    st.write_table(
        "b",
        "step_breakdown",
        _breakdown(
            [(0, 1, 100_000, 80_000, 10_000, 10_000, 0, 10_000), (1, 1, 100_000, 70_000, 10_000, 0, 10_000, 30_000)]
        ),
    )
    st.write_table(
        "a", "kernels", pd.DataFrame({"name": ["MatMul", "Add", "MatMul"], "total_us": [4000.0, 1000.0, 2000.0]})
    )
    st.write_table("b", "kernels", pd.DataFrame({"name": ["MatMul", "Conv"], "total_us": [1000.0, 500.0]}))
    st.write_table(
        "a",
        "comm_ops",
        pd.DataFrame(
            {
                "op_type": ["allreduce"] * 4,
                "elapse_ms": [1.0, 2.0, 3.0, 4.0],
                "size_bytes": [100.0] * 4,
                "busbw_gbps": [1.0, 2.0, 3.0, 6.0],
            }
        ),
    )
    st.write_run(_record("f", 2, {}, status="failed"))
    return st


def test_step_samples_by_hand(store):
    s = step_samples(store, store.get_run("a"))
    assert s["step_time_s"] == pytest.approx([0.2, 0.3, 0.25])  # the slowest rank per step, warm-up left out
    assert s["throughput"] == pytest.approx([8 / 0.2, 8 / 0.3, 8 / 0.25])  # all ranks' samples / that time
    # comm share per step: mean over ranks of communication / step -> step 1: (0.25 + 0.15) / 2; step 2: (0.2 + 0.4) / 2
    assert s["comm_share"] == pytest.approx([0.2, 0.3])
    assert s["communication_not_overlapped_s"] == pytest.approx([0.035, 0.020])  # mean over ranks, in s


def test_step_samples_of_an_imported_profile_take_step_time_from_the_breakdown(tmp_path):
    st = Store(tmp_path / "r")
    st.write_run(_record("imp", 2, {}, config={"train": {}}))
    st.write_table(
        "imp",
        "step_breakdown",
        _breakdown([(0, 7, 100_000, 1, 0, 0, 0, 0), (1, 7, 300_000, 1, 0, 0, 0, 0), (0, 8, 0, 0, 0, 0, 0, 0)]),
    )
    s = step_samples(st, st.get_run("imp"))
    assert s["step_time_s"] == pytest.approx([0.3]) and "throughput" not in s  # a 0-length step is no step
    assert s["comm_share"] == pytest.approx([0.0])


def test_compare_runs_by_hand(store):
    c = compare_runs(store, "a", "b")
    by = {m["metric"]: m for m in c.metrics}
    ta, tb = [0.2, 0.3, 0.25], [0.1, 0.15, 0.125]
    st_ = by["step_time_s"]
    assert st_["a"] == pytest.approx(0.25) and st_["b"] == pytest.approx(0.125)
    assert st_["delta"] == pytest.approx(-0.125) and st_["rel"] == pytest.approx(-0.5)
    assert st_["n_a"] == 3 and st_["n_b"] == 3
    assert st_["p_value"] == pytest.approx(exact_mann_whitney_p(ta, tb))  # 3 vs 3 separated: 0.1
    # bootstrap interval of median(b) - median(a) (scipy, seed 0), relative to median(a); every resampled
    # difference lies in [min(tb) - max(ta), max(tb) - min(ta)] = [-0.2, -0.05]
    ref = stats.bootstrap(
        (np.array(ta), np.array(tb)),
        lambda x, y, axis=-1: np.median(y, axis=axis) - np.median(x, axis=axis),
        vectorized=True,
        paired=False,
        n_resamples=4999,
        method="percentile",
        random_state=0,
    ).confidence_interval
    assert st_["ci_low"] == pytest.approx(ref.low / 0.25) and st_["ci_high"] == pytest.approx(ref.high / 0.25)
    assert -0.2 / 0.25 <= st_["ci_low"] <= -0.5 <= st_["ci_high"] <= -0.05 / 0.25
    assert by["throughput"]["higher_is_better"] is True and st_["higher_is_better"] is False
    assert by["comm_share"]["a"] == pytest.approx(0.25) and by["comm_share"]["n_b"] == 1
    assert by["comm_share"]["ci_low"] is None  # one sample on a side: no interval
    # the breakdown in ms per step (catalogue: per step the mean over ranks, the median over the steady steps);
    # the step row is the profiled step the parts split (catalogue breakdown_step_s = computing + exposed + free,
    # each the mean over ranks and the median over steps 1-2): a 82.5 + median(35, 20) + median(55, 25) = 150 ms;
    # b (step 1 only) 75 + 5 + 20 = 100 ms; not the unprofiled step time (record: 0.25 s and 0.125 s)
    bd = {r["part"]: r for r in c.breakdown}
    assert bd["step"]["a_ms"] == pytest.approx(150.0) and bd["step"]["b_ms"] == pytest.approx(100.0)
    assert bd["computing"]["a_ms"] == pytest.approx(82.5) and bd["computing"]["delta_ms"] == pytest.approx(75.0 - 82.5)
    # kernels: ms per rank-step (a: 4 rank-steps incl. warm-up rows of the table = 5 distinct) sorted by |delta|
    k = {r["kernel"]: r for r in c.kernels}
    assert k["MatMul"]["a_ms"] == pytest.approx(6.0 / 5) and k["MatMul"]["b_ms"] == pytest.approx(1.0 / 2)
    assert k["Conv"]["a_ms"] == 0.0 and k["Conv"]["b_ms"] == pytest.approx(0.25)
    assert [r["kernel"] for r in c.kernels][0] == "MatMul"
    # collectives per rank-step: 4 all-reduces over 5 rank-steps; busbw is the mean
    (ar,) = c.collectives
    assert ar["op"] == "allreduce" and ar["count_a"] == pytest.approx(0.8) and ar["count_b"] is None
    assert ar["time_ms_a"] == pytest.approx(2.0) and ar["bytes_a"] == pytest.approx(80.0)
    assert ar["busbw_gbps_a"] == pytest.approx(3.0)
    # the run-level metrics side by side; an unknown one stays null
    sm = {m["metric"]: m for m in c.summary_metrics}
    assert sm["throughput"]["rel"] == pytest.approx(1.0) and sm["step_time_s"]["rel"] == pytest.approx(-0.5)
    assert sm["comm_share"]["a"] is None and sm["comm_share"]["b"] == 0.2 and sm["comm_share"]["rel"] is None
    assert {d["key"] for d in c.settings_diff} == {"config.parallel.comm_fusion"}
    doc = c.to_dict()
    assert doc["a"]["run_id"] == "a" and doc["metrics"] == c.metrics and "samples" not in doc


def test_compare_refuses_a_failed_run(store):
    with pytest.raises(UserError, match="status 'failed'"):
        compare_runs(store, "a", "f")


def test_settings_diff_skips_per_run_keys():
    a = {
        "settings": {"world_size": 1, "repeat": 0},
        "config": {"run_id": "x", "output_dir": "/a", "repeat": 0, "train": {"lr": 0.1, "seed": 0}},
    }
    b = {
        "settings": {"world_size": 2, "repeat": 1},
        "config": {"run_id": "y", "output_dir": "/b", "repeat": 1, "train": {"lr": 0.1, "seed": 1}, "extra": True},
    }
    rows = settings_diff(a, b)
    assert rows == [
        {"key": "config.extra", "a": None, "b": True},
        {"key": "config.train.seed", "a": 0, "b": 1},
        {"key": "settings.repeat", "a": 0, "b": 1},
        {"key": "settings.world_size", "a": 1, "b": 2},
    ]
