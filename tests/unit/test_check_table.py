"""The CI gate's decision as a table: metric x direction x (effect, noise, repeats, samples) -> verdict.

The rule (docs/check.md): a change is a regression when it is significant (two-sided Mann-Whitney p < 0.05
on the pooled per-step samples) AND worse than max(threshold 5%, the repeat-to-repeat noise floor); an
improvement likewise the other way; too few samples is undecided. Ratio metrics measure the change as a
ratio of medians, shares (comm_share) in absolute points.

Samples are built here, per row: each baseline repeat is a tight cluster (8 steps, +-1%) around its
centre; consecutive repeats' centres are `noise` apart (the noise floor is the spread
of all of them); the current run is one such cluster `effect` worse (by the
metric's direction) than the pooled baseline median. Expected verdicts follow from the rule by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from perfbench.regress.check import DEFAULT_METRICS, decide_metric

#: every metric the gate checks by default, with the direction a user means by "better" (stated here,
#: independently of the code) and how a change is measured
GATE = {
    "throughput": ("higher", "ratio"),
    "step_time_s": ("lower", "ratio"),
    "comm_share": ("lower", "share"),
    "communication_not_overlapped_s": ("lower", "ratio"),
}

# (worse_by, noise, baseline repeats, samples per repeat) -> verdict.  worse_by < 0 means better.
# For ratio metrics worse_by and noise are relative (0.30 = 1.3x worse), for shares absolute points.
ROWS = [
    ((0.00, 0.00, 1, 8), "unchanged"),  # nothing changed
    ((0.30, 0.00, 1, 8), "regression"),  # clearly worse, quiet machine
    ((-0.30, 0.00, 1, 8), "improvement"),  # clearly better
    ((0.03, 0.00, 1, 8), "unchanged"),  # significant but under the 5% threshold
    ((-0.03, 0.00, 1, 8), "unchanged"),
    ((0.30, 0.50, 2, 8), "unchanged"),  # inside the repeat-to-repeat noise of the baseline
    ((-0.30, 0.50, 2, 8), "unchanged"),
    ((0.30, 0.10, 2, 8), "regression"),  # beyond a small noise floor
    ((0.80, 0.50, 2, 8), "regression"),  # beyond a large one
    ((0.30, 0.05, 3, 8), "regression"),  # 3 repeats: floor = spread of their medians (1.05^2 - 1 = 10%)
    ((0.08, 0.05, 3, 8), "unchanged"),  # ... which an 8% change does not exceed
    ((0.30, 0.00, 1, 2), "undecided"),  # 2 steps a side: too few samples to test
]


def _cluster(center: float, n: int, kind: str) -> list[float]:
    jit = np.linspace(-1, 1, n) if n > 1 else np.zeros(1)
    return list(center + 0.002 * jit) if kind == "share" else list(center * (1 + 0.01 * jit))


def _case(direction: str, kind: str, worse_by: float, noise: float, repeats: int, n: int):
    v0 = 0.30 if kind == "share" else 100.0
    centers = [v0 + i * noise if kind == "share" else v0 * (1 + noise) ** i for i in range(repeats)]
    base = [_cluster(c, n, kind) for c in centers]
    pooled = float(np.median(np.concatenate(base)))
    if kind == "share":
        cur = pooled + worse_by if direction == "lower" else pooled - worse_by
    else:
        factor = 1 + abs(worse_by)
        worse = factor if worse_by >= 0 else 1 / factor  # the factor by which the step gets worse
        cur = pooled * worse if direction == "lower" else pooled / worse
    return base, [_cluster(cur, n, kind)]


def _entries(repeats, metric):
    return [{"samples": {metric: r}, "metrics": {}} for r in repeats]


def test_the_table_covers_every_gated_metric():
    assert set(GATE) == set(DEFAULT_METRICS)


@pytest.mark.parametrize("row,verdict", ROWS, ids=[f"worse{r[0]:+.2f}-noise{r[1]}-rep{r[2]}-n{r[3]}" for r, _ in ROWS])
@pytest.mark.parametrize("metric", sorted(GATE))
def test_gate_verdict(metric, row, verdict):
    direction, kind = GATE[metric]
    base, cur = _case(direction, kind, *row)
    r = decide_metric(metric, _entries(base, metric), _entries(cur, metric), 0.05, 0.05)
    assert r["verdict"] == verdict, r
    if verdict in ("regression", "improvement"):
        assert r["p_value"] < 0.05
        # the reported change has the sign of the move in the metric's own units
        moved_up = float(np.median(cur[0])) > float(np.median(np.concatenate(base)))
        assert (r["change"] > 0) == moved_up
