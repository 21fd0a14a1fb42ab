"""compare's one-line verdict: the direction of the change in the headline metric (hand-made comparisons)."""

from __future__ import annotations

from types import SimpleNamespace

from perfbench.views.compare import verdict


def _cmp(name: str, a: float, b: float, p: float | None) -> SimpleNamespace:
    row = {"metric": name, "a": a, "b": b, "p_value": p, "rel": (b - a) / a}
    return SimpleNamespace(metrics=[row])


def test_equal_medians_are_neither_faster_nor_slower():
    assert verdict(_cmp("step_time_s", 0.1366, 0.1366, None)).startswith("B is as fast as A")
    assert verdict(_cmp("throughput", 200.0, 200.0, 0.9)).startswith("B is as fast as A")


def test_a_shorter_step_is_faster_and_more_throughput_is_faster():
    assert verdict(_cmp("step_time_s", 0.2, 0.1, 0.01)).startswith("B is faster than A")
    assert verdict(_cmp("step_time_s", 0.1, 0.2, 0.01)).startswith("B is slower than A")
    assert verdict(_cmp("throughput", 100.0, 200.0, 0.01)).startswith("B is faster than A")
    assert verdict(_cmp("throughput", 200.0, 100.0, None)).startswith("B is slower than A")
