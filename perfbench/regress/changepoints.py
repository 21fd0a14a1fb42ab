"""Change points in a metric's history, and whether the newest points left the history's range.

Two published methods, both from maintained libraries:

* **E-Divisive** (Matteson & James 2014, as used by MongoDB's and Apache Otava's performance CI), from
  MongoDB's ``signal-processing-algorithms``: splits the series where the energy distance between the
  two sides is largest, keeps the split when a permutation test (``permutations`` shuffles) gives
  p <= ``alpha``, and recurses into the segments. It needs points on both sides of a change, so it finds
  a change that began at least two points back; each change point gets a size (ratio of the segment
  medians) and a confidence, 1 - p of the energy-statistics permutation test between the two segments
  (``get_energy_statistics_and_probabilities``). Positive series are split on their log values, as the
  prediction test below judges them: a metric and its reciprocal (step time and throughput) then have the same
  change points, and a change is a ratio wherever in the range it happens.
* **Prediction test** for the newest run(s) alone (one commit just measured): Student-t prediction
  interval of the mean of ``r`` new values given ``n`` values of the reference segment, on log values
  so that ratios are symmetric: t = (mean_new - mean_ref) / (s_ref * sqrt(1/r + 1/n)), df = n - 1
  (scipy.stats.t).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SEED = 1234  # E-Divisive's permutation test shuffles: fixed seed, same answer for the same series


@dataclass
class ChangePoint:
    index: int  # first point of the new segment
    before: float  # median of the segment before
    after: float  # median of the segment after
    ratio: float  # after / before
    p_value: float  # energy-statistics permutation test between the two segments

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def e_divisive(values: list[float], *, alpha: float = 0.05, permutations: int = 200) -> list[ChangePoint]:
    """Change points of `values` (a series in time order), sorted by index."""
    from signal_processing_algorithms.determinism import deterministic_numpy_random
    from signal_processing_algorithms.energy_statistics.energy_statistics import (
        e_divisive as _e_divisive,
        get_energy_statistics_and_probabilities,
    )

    x = np.asarray(values, dtype=float)
    if len(x) < 4 or np.ptp(x) == 0:
        return []
    # on raw values the energy distances of a metric and of its reciprocal differ: clean runs spread over 60-400
    # samples/s hide a drop to 10 samples/s that the same runs' step times show at once
    y = np.log(x) if bool(np.all(x > 0)) else x
    with deterministic_numpy_random(SEED):
        idx = sorted(int(i) for i in _e_divisive(y, pvalue=alpha, permutations=permutations) if 0 < i < len(y))
        bounds = [0] + idx + [len(x)]
        out = []
        for k, i in enumerate(idx):
            probs = get_energy_statistics_and_probabilities(
                y[bounds[k] : i], y[i : bounds[k + 2]], permutations=permutations
            )
            a, b = x[bounds[k] : i], x[i : bounds[k + 2]]
            before, after = float(np.median(a)), float(np.median(b))
            out.append(ChangePoint(i, before, after, after / before if before else math.inf, float(probs.e_pvalue)))
    return out


def segments(n: int, points: list[ChangePoint]) -> list[tuple[int, int]]:
    """[start, end) of each segment a list of change points cuts a series of n values into."""
    cuts = [0] + [c.index for c in points] + [n]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def prediction_p(reference: list[float], new: list[float], *, higher_is_better: bool) -> float | None:
    """One-sided p that the mean of `new` is this much worse than `reference` by chance (log values,
    Student-t prediction interval). None with fewer than 3 reference values or no spread."""
    from scipy import stats

    ref = np.log(np.asarray([v for v in reference if v and v > 0], dtype=float))
    cur = np.log(np.asarray([v for v in new if v and v > 0], dtype=float))
    if len(ref) < 3 or len(cur) < 1:
        return None
    s = float(np.std(ref, ddof=1))
    if s == 0:
        return None
    t = (float(np.mean(cur)) - float(np.mean(ref))) / (s * math.sqrt(1 / len(cur) + 1 / len(ref)))
    worse_t = -t if higher_is_better else t
    return float(stats.t.sf(worse_t, df=len(ref) - 1))
