"""The change-point step on hand-made series whose change points are known by construction, and the
history gate's verdicts on hand-made histories (values and expected answers written here, not computed
by the code under test)."""

from __future__ import annotations

import math

import pytest

from perfbench.regress.changepoints import e_divisive, prediction_p, segments
from perfbench.regress.history import Point, Series, gate_value, judge_series

# a fixed "noise" pattern (±1%) so the series are exactly reproducible
WIGGLE = [0.0, 0.01, -0.008, 0.004, -0.01, 0.007, -0.003, 0.009, -0.006, 0.002, -0.009, 0.005]


def level(value: float, n: int, offset: int = 0) -> list[float]:
    return [value * (1 + WIGGLE[(i + offset) % len(WIGGLE)]) for i in range(n)]


def test_a_step_is_found_where_it_begins_with_its_size():
    series = level(100.0, 10) + level(80.0, 8, offset=3)  # throughput drops 20% at point 10
    (cp,) = e_divisive(series)
    assert cp.index == 10
    assert cp.before == pytest.approx(100.0, rel=0.01) and cp.after == pytest.approx(80.0, rel=0.01)
    assert cp.ratio == pytest.approx(0.8, rel=0.02)
    assert cp.confidence >= 0.95


def test_two_steps_are_both_found():
    series = level(50.0, 8) + level(60.0, 8, 2) + level(45.0, 8, 5)
    assert [c.index for c in e_divisive(series)] == [8, 16]
    assert segments(24, e_divisive(series)) == [(0, 8), (8, 16), (16, 24)]


def test_a_flat_noisy_series_has_no_change_point():
    assert e_divisive(level(100.0, 24)) == []
    assert e_divisive([5.0] * 10) == []  # no spread at all
    assert e_divisive([1.0, 2.0, 3.0]) == []  # too short to split


def test_a_metric_and_its_reciprocal_have_the_same_change_points():
    """4 clean runs whose throughput a loaded machine spread over 60-400 samples/s, then 3 runs slowed to ~10
    samples/s (a sleep in every step): the slowdown began at point 4, in samples/s as in s per step (4 samples a
    step). On raw values the spread of the clean throughputs hid it (no change point) while the step times
    showed it."""
    throughput = [400.0, 150.0, 60.0, 300.0, 9.6, 9.7, 9.8]
    step_time = [4.0 / v for v in throughput]
    (cp,) = e_divisive(throughput)
    assert cp.index == 4 and cp.before == pytest.approx(225.0) and cp.after == pytest.approx(9.7)
    (cs,) = e_divisive(step_time)
    assert cs.index == 4 and cs.p_value == pytest.approx(cp.p_value) and cs.after == pytest.approx(4.0 / 9.7)


def test_prediction_p_matches_the_student_t_formula():
    # log reference values 0, +0.1, -0.1: mean 0, sd 0.1 (n=3); one new value with log 0.3 (lower is better)
    ref = [1.0, math.exp(0.1), math.exp(-0.1)]
    t = 0.3 / (0.1 * math.sqrt(1 + 1 / 3))
    expected = 0.5 * (1 - t / math.sqrt(t * t + 2))  # Student-t survival function with 2 degrees of freedom
    assert prediction_p(ref, [math.exp(0.3)], higher_is_better=False) == pytest.approx(expected, rel=1e-9)
    # the same drop is "better" for a higher-is-better metric: p = 1 - expected
    assert prediction_p(ref, [math.exp(0.3)], higher_is_better=True) == pytest.approx(1 - expected, rel=1e-9)
    assert prediction_p([1.0, 1.0], [2.0], higher_is_better=False) is None  # fewer than 3 reference values


def make_series(values: list[float], *, current: int = 1, samples_spread: float = 0.01) -> Series:
    """One point per value; the last `current` points belong to the entry "cur". Each point carries 10 per-step
    samples around its value (for the Mann–Whitney part)."""
    pts = []
    n = len(values)
    for i, v in enumerate(values):
        eid = "cur" if i >= n - current else f"e{i:02d}"
        samples = [v * (1 + samples_spread * WIGGLE[k]) for k in range(10)]
        pts.append(Point(eid, f"c{i:02d}", f"{i:040x}", None, float(i), f"run{i}", 0, v, samples))
    return Series("world_size=1", {"world_size": 1}, [], "throughput", pts)


def test_gate_flags_a_new_10_percent_drop_at_the_current_commit():
    ser = make_series(level(100.0, 10) + [90.0])
    j = judge_series(ser, "cur", "throughput", threshold=0.05, alpha=0.05)
    assert j["verdict"] == "regression"
    assert j["began_at"] == "c10"
    assert j["change"] == pytest.approx(-0.10, abs=0.01)


def test_gate_finds_where_an_older_regression_began():
    # the drop began 4 points before the current one and is still there
    ser = make_series(level(100.0, 10) + level(85.0, 4, 1) + [85.5])
    j = judge_series(ser, "cur", "throughput", threshold=0.05, alpha=0.05)
    assert j["verdict"] == "regression" and j["method"] == "e-divisive"
    assert j["began_at"] == "c10" and j["began_run"] == "run10"
    assert j["worse_by"] == pytest.approx(100 / 85 - 1, rel=0.05)
    assert j["confidence"] >= 0.95


def test_gate_is_quiet_on_a_clean_history_and_on_a_small_wobble():
    assert (
        judge_series(make_series(level(100.0, 12)), "cur", "throughput", threshold=0.05, alpha=0.05)["verdict"]
        == "unchanged"
    )
    assert (
        judge_series(make_series(level(100.0, 10) + [97.0]), "cur", "throughput", threshold=0.05, alpha=0.05)["verdict"]
        == "unchanged"
    )  # 3% < 5% threshold


def test_gate_direction_follows_the_metric():
    # step time 10% up is a regression; 10% down an improvement
    up = make_series(level(0.05, 10) + [0.055])
    up.metric = "step_time_s"
    assert judge_series(up, "cur", "step_time_s", threshold=0.05, alpha=0.05)["verdict"] == "regression"
    down = make_series(level(0.05, 10) + [0.045])
    assert judge_series(down, "cur", "step_time_s", threshold=0.05, alpha=0.05)["verdict"] == "improvement"


def test_gate_needs_some_history():
    j = judge_series(make_series([100.0, 101.0, 90.0]), "cur", "throughput", threshold=0.05, alpha=0.05)
    assert j["verdict"] == "no-history"


def test_gate_value_is_the_fast_tail_of_the_steps():
    steps = [float(x) for x in range(10, 20)]  # 10 ... 19
    # numpy's default (linear) quantile: position 0.1 * 9 = 0.9 -> 10.9; position 0.9 * 9 = 8.1 -> 18.1
    assert gate_value(99.0, steps, "lower") == pytest.approx(10.9)
    assert gate_value(99.0, steps, "higher") == pytest.approx(18.1)
    assert gate_value(99.0, [], "lower") == 99.0  # no per-step samples: the run's value
    assert gate_value(99.0, steps, None) == 99.0  # no direction: the run's value


def bursty_run(slowdown: float, bursts: int, n: int = 20) -> list[float]:
    """CPU ms per step of one run: 40 ms (+ slowdown) with ±1% wiggle, the first `bursts` steps doubled (a
    neighbour's burst: threads spin while a peer waits for a core)."""
    return [40.0 * (1 + slowdown) * (1 + WIGGLE[k % len(WIGGLE)]) * (2 if k < bursts else 1) for k in range(n)]


def bursty_series(current: list[float]) -> Series:
    runs = [bursty_run(0.0, b) for b in (0, 2, 10, 4, 8, 10, 3, 6)] + [current]
    pts = [
        Point(
            "cur" if i == len(runs) - 1 else f"e{i:02d}",
            f"c{i:02d}",
            None,
            None,
            float(i),
            f"run{i}",
            0,
            sorted(s)[len(s) // 2],
            s,
        )
        for i, s in enumerate(runs)
    ]  # value: a median, as the store has
    return Series("world_size=1", {"world_size": 1}, [], "step_cpu_s", pts)


def test_gate_judges_the_fast_steps_so_bursts_neither_hide_nor_fake_a_10_percent_slowdown():
    ser = bursty_series(bursty_run(0.10, 4))
    medians = [p.value for p in ser.points[:-1]]
    assert max(medians) / min(medians) > 1.45  # the runs' medians alone spread by half: 10% is lost in them
    j = judge_series(ser, "cur", "step_cpu_s", threshold=0.05, alpha=0.05)
    assert j["verdict"] == "regression" and j["began_at"] == "c08", j
    assert j["change"] == pytest.approx(0.10, abs=0.015)
    # a clean run with bursts in most steps (its median is twice the typical one) is not a regression
    clean = judge_series(bursty_series(bursty_run(0.0, 12)), "cur", "step_cpu_s", threshold=0.05, alpha=0.05)
    assert clean["verdict"] == "unchanged", clean
