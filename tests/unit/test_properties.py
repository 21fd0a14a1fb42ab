"""Invariants that must hold for every input, checked with Hypothesis (property-based tests).

* the step breakdown's parts add up to the step, and overlap is what both compute and communication cover;
* an unknown metric stays null (never 0) through every surface: run record -> `ls --json` -> `show --json`
  -> `compare --json`;
* swapping baseline and current turns every regression into an improvement (and back) for every metric the
  gate checks, by its direction in the metric catalogue; a clear shift in the worse direction is a regression;
* identical distributions are never a regression.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzers.analyses.breakdown import step_breakdown
from analyzers.catalogue import METRICS as CATALOGUE
from analyzers.schema import OPS, STEPS, conform
from perfbench.regress.check import DEFAULT_METRICS, decide_metric


def _n(examples: int) -> int:
    """Hypothesis examples per test: fewer under `make mutation`, which runs these once per mutant."""
    return max(5, examples // 4) if os.environ.get("PERFBENCH_MUTATION") else examples


FAST = settings(max_examples=_n(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- the step breakdown -------------------------------------------------------------------------------------------

interval = st.tuples(st.integers(-20, 220), st.integers(0, 120), st.sampled_from(["compute", "communication"]))


@settings(max_examples=_n(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(interval, max_size=12), st.integers(1, 200))
def test_breakdown_parts_add_up_to_the_step(ops, length):
    df = conform(
        pd.DataFrame(
            [
                (0, 0, f"op{i}" if c == "compute" else f"hcom_allReduce_{i}", c, float(s), float(d))
                for i, (s, d, c) in enumerate(ops)
            ],
            columns=["rank", "step", "name", "category", "start_us", "dur_us"],
        ),
        OPS,
    )
    steps = conform(pd.DataFrame({"rank": [0], "step": [0], "start_us": [0.0], "end_us": [float(length)]}), STEPS)
    b = step_breakdown(df, steps).iloc[0]
    assert b["step_us"] == length
    if not ops:  # no op data for the step: its parts are unknown (null), not idle
        assert all(pd.isna(b[k]) for k in ("computing_us", "communication_us", "overlapped_us", "free_us"))
        return
    # independent brute force on a 1 us grid (all edges are integers): which microseconds are covered
    grid = np.arange(length)
    cov = {"compute": np.zeros(length, bool), "communication": np.zeros(length, bool)}
    for s, d, c in ops:
        cov[c] |= (grid >= s) & (grid < s + d)
    c, m = cov["compute"], cov["communication"]
    assert b["computing_us"] == pytest.approx(c.sum())
    assert b["communication_us"] == pytest.approx(m.sum())
    assert b["overlapped_us"] == pytest.approx((c & m).sum())
    assert b["free_us"] == pytest.approx((~(c | m)).sum())
    parts = b["computing_us"] + b["communication_not_overlapped_us"] + b["free_us"]
    assert parts == pytest.approx(b["step_us"], abs=1e-6)


# ---- unknown stays null through every surface ------------------------------------------------------------------------

SHOWN = [
    "throughput",
    "step_time_s",
    "computing_s",
    "communication_not_overlapped_s",
    "overlapped_s",
    "free_s",
    "comm_share",
    "kernel_utilization",
    "collectives_per_step",
    "comm_bytes_per_step",
    "bubble_fraction",
    "expert_load_cv",
]


def _cli(*args) -> tuple[int, str]:
    from perfbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    assert code == 0, err.getvalue()
    return code, out.getvalue()


@settings(max_examples=_n(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(SHOWN), st.none() | st.floats(0.001, 1e6), min_size=len(SHOWN)),
    st.sets(st.sampled_from(SHOWN)),
)
def test_unknown_stays_null_through_every_surface(values, unknown_in_b):
    from perfbench.store import Store

    a_metrics = dict(values)
    b_metrics = {k: (None if k in unknown_in_b else (v if v is not None else 1.0)) for k, v in values.items()}
    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "results"
        store = Store(res)
        for rid, m in (("run-a", a_metrics), ("run-b", b_metrics)):
            store.write_run(
                {
                    "run_id": rid,
                    "sweep_id": "s",
                    "source": "analyze",
                    "status": "ok",
                    "error": None,
                    "settings": {"workload": "resnet50", "world_size": 2, "repeat": 0},
                    "config": {},
                    "metrics": m,
                }
            )
        rows = json.loads(_cli("ls", "--results", res, "--json")[1])
        rows = {r["run_id"]: r for r in (rows["runs"] if isinstance(rows, dict) else rows)}
        shown = {rid: json.loads(_cli("show", rid, "--results", res, "--json")[1]) for rid in ("run-a", "run-b")}
        cmp = json.loads(_cli("compare", "run-a", "run-b", "--results", res, "--json")[1])
    summary = {m["metric"]: m for m in cmp.get("summary_metrics", [])}
    for rid, metrics in (("run-a", a_metrics), ("run-b", b_metrics)):
        side = "a" if rid == "run-a" else "b"
        for k, v in metrics.items():
            if v is None:
                assert rows[rid].get(k) is None, (rid, k, rows[rid].get(k))
                assert shown[rid]["metrics"].get(k) is None, (rid, k)
                if k in shown[rid].get("summary", {}):
                    assert shown[rid]["summary"][k] is None, (rid, k)
                if k in summary:
                    assert summary[k][side] is None and summary[k]["rel"] is None, summary[k]
            else:
                assert rows[rid][k] == pytest.approx(v) and shown[rid]["metrics"][k] == pytest.approx(v)
                assert summary[k][side] == pytest.approx(v)
    for k in SHOWN:
        if a_metrics[k] is None and b_metrics[k] is None:
            assert k not in summary or (summary[k]["a"] is None and summary[k]["b"] is None)
    assert rows["run-a"]["scaling_efficiency"] is None  # no 1-rank run of this configuration: unknown


# ---- the gate's decision: symmetric, by the catalogue's direction
# -----------------------------------------------------

#: the metrics `perfbench check` gates by default, each with a direction in the catalogue
GATED = [m for m in DEFAULT_METRICS if CATALOGUE[m].better in ("higher", "lower")]


def _entries(repeats, metric):
    return [{"samples": {metric: [float(x) for x in r]}, "metrics": {}} for r in repeats]


def _scale(metric):
    return 0.3 if CATALOGUE[metric].kind == "share" else 100.0


positive = st.floats(0.2, 5.0, allow_nan=False, allow_infinity=False)
side = st.lists(st.lists(positive, min_size=3, max_size=12), min_size=1, max_size=3)


def test_every_default_gated_metric_has_a_direction():
    assert GATED == list(DEFAULT_METRICS)


@FAST
@given(st.sampled_from(GATED), side, side)
def test_swapping_baseline_and_current_swaps_regression_and_improvement(metric, base, cur):
    k = _scale(metric) / 5.0
    b = _entries([[x * k for x in r] for r in base], metric)
    c = _entries([[x * k for x in r] for r in cur], metric)
    fwd = decide_metric(metric, b, c, 0.05, 0.05)["verdict"]
    back = decide_metric(metric, c, b, 0.05, 0.05)["verdict"]
    flip = {"regression": "improvement", "improvement": "regression"}
    assert back == flip.get(fwd, fwd), (metric, fwd, back)


@FAST
@given(
    st.sampled_from(GATED),
    st.floats(0.5, 2.0),
    st.lists(st.floats(0.0, 0.15), min_size=6, max_size=15),
    st.floats(1.5, 4.0),
)
def test_a_clear_shift_the_worse_way_is_a_regression(metric, center, jitter, factor):
    """Every current sample worse than every baseline sample by a factor >= 1.5 (or 20+ points for shares)."""
    m = CATALOGUE[metric]
    base = [center * (1 + j) for j in jitter]  # one tight cluster: no overlap after the shift
    if m.kind == "share":
        b = [0.05 + 0.01 * x for x in base]
        cur = [x + 0.1 * factor for x in b] if m.better == "lower" else [x - 0.04 for x in b]
    else:
        b = [x * 100 for x in base]
        cur = [x * factor for x in b] if m.better == "lower" else [x / factor for x in b]
    r = decide_metric(metric, _entries([b], metric), _entries([cur], metric), 0.05, 0.05)
    assert r["verdict"] == "regression", r
    assert decide_metric(metric, _entries([cur], metric), _entries([b], metric), 0.05, 0.05)["verdict"] == "improvement"


@FAST
@given(
    st.sampled_from(GATED),
    st.lists(positive, min_size=3, max_size=30),
    st.randoms(use_true_random=False),
    st.integers(1, 3),
)
def test_identical_distributions_are_never_a_regression(metric, values, rnd, repeats):
    k = _scale(metric) / 5.0
    vals = [v * k for v in values]
    shuffled = list(vals)
    rnd.shuffle(shuffled)
    cuts = sorted(rnd.sample(range(1, len(shuffled)), min(repeats - 1, len(shuffled) - 1))) if len(shuffled) > 1 else []
    parts = [shuffled[i:j] for i, j in zip([0] + cuts, cuts + [len(shuffled)])]
    r = decide_metric(metric, _entries([vals], metric), _entries(parts, metric), 0.05, 0.05)
    assert r["verdict"] not in ("regression", "improvement"), r
    if r.get("p_value") is not None:
        assert math.isclose(r["p_value"], 1.0)
