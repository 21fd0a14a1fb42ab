"""The dashboard's runs grid shows a run's estimates of its own cost (profiler_overhead, capture_cost) as `show`
prints them: with their interval, or "below what this run can resolve", never as a bare negative cost;
the raw value still sorts. Hand-built runs in a store, no msrun."""

from __future__ import annotations

from dashboards import data, grid
from perfbench.store import Store


def _record(rid, metrics):
    return {
        "run_id": rid,
        "sweep_id": "s",
        "source": "sweep",
        "status": "ok",
        "error": None,
        "settings": {"workload": "resnet50", "world_size": 1, "repeat": 0},
        "config": {"run_id": rid},
        "metrics": {"throughput": 10.0, "step_time_s": 0.1, **metrics},
    }


def test_grid_never_shows_a_bare_negative_cost(tmp_path):
    store = Store(tmp_path, create=True)
    # a: -24% with an interval holding 0; b: +20% resolved; c: -1.9% with no interval
    store.write_run(
        _record("a", {"profiler_overhead": -0.24, "profiler_overhead_low": -0.5, "profiler_overhead_high": 0.1})
    )
    store.write_run(
        _record(
            "b",
            {
                "profiler_overhead": 0.2,
                "profiler_overhead_low": 0.1,
                "profiler_overhead_high": 0.3,
                "capture_cost": 0.025,
            },
        )
    )
    store.write_run(_record("c", {"capture_cost": -0.019}))
    data.configure(tmp_path)
    rows, _, shown, total, frame = grid.query(
        None, "", [{"column_id": "metrics.profiler_overhead", "direction": "asc"}], 0, 10
    )
    assert shown == total == 3
    cells = {r["run_id"]: r for r in rows}
    assert cells["a"]["metrics.profiler_overhead"] == "below what this run can resolve (-50.0% … +10.0%)"
    assert cells["b"]["metrics.profiler_overhead"] == "+20.0% (+10.0% … +30.0%)"
    assert cells["b"]["metrics.capture_cost"] == "+2.5%"  # positive, no interval: the value
    assert cells["c"]["metrics.capture_cost"] == "below what this run can resolve (no interval)"
    # sorting still uses the numbers: a (-0.24) before b (+0.2); c has none
    assert [r["run_id"] for r in rows][:2] == ["a", "b"]
    assert frame["metrics.profiler_overhead"].iloc[0] == -0.24


def test_run_page_metrics_table_shows_the_interval_not_a_bare_negative():
    from dashboards.pages.run import key_numbers

    text = str(
        key_numbers(
            {
                "throughput": 1.0,
                "capture_cost": -0.019,
                "capture_cost_low": -0.05,
                "capture_cost_high": 0.01,
                "profiler_overhead": 0.2,
            }
        )
    )
    assert "below what this run can resolve (-5.0% … +1.0%)" in text
    assert "-1.9%" not in text and "capture cost lo" not in text  # the interval's ends are not rows of their own
    assert "+20.0%" in text  # positive, no interval: the value
