"""The history gate on real histories: short real 1-rank sweeps (tiny ResNet) where a slowdown is injected
(`inject.delay_ms`) from one point on, a drift, and a clean history. The injected delay is "the code change":
it is left out of the configuration (--ignore-setting delay_ms) so all points form one series."""

from __future__ import annotations

import json

import pytest

from perfbench.store import Store
from tests.support import perfbench_in_process, run_perfbench, two_at_a_time, write_yaml

pytestmark = pytest.mark.msrun

TINY = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 10, "warmup_steps": 2},
    "profile": {"enabled": False, "steps": 1},
    "launch": {"timeout_s": 300, "stall_timeout_s": 120},
}
# several times the tiny model's step time (~10 ms idle): on this shared machine whole runs get 2-10x slower
# under load, and a sleep is the one part of a step that load does not stretch. At load 20-30 a clean run's median
# step reached 216 ms, as slow as a run slowed by 150 ms, and the slowdown test failed twice in a row; 400 ms keeps
# the slowed runs above any clean one seen (+10 s of sleep for the module)
SLOW_MS = 400
# a drift of 60 ms more per point: its first point is above a clean run's 10% fastest steps even with the other
# sweep's launch beside it (the gate judges those; clean runs' medians at load 3-5: 7-38 ms)
DRIFT_MS = [60, 120, 180, 240]


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Runs by kind: 3 clean and 3 slowed (interleaved in time) in one sweep, a fourth clean one and 4 drifting ones
    in another, the two sweeps side by side (11 launches: the tests read 4 clean, 3 slowed and 4 drifting runs). The
    injected sleeps are many times a clean step, and the gate judges each run by its 10% fastest steps, which the
    other sweep's launch beside it does not make as slow as a slowed or drifted run's."""
    base = tmp_path_factory.mktemp("history_pool")
    results = base / "pool"
    step = write_yaml(base / "step.yaml", dict(TINY, name="step", sweep={"delay_ms": [0, SLOW_MS]}, repeats=3))
    drift = write_yaml(base / "drift.yaml", dict(TINY, name="drift", sweep={"delay_ms": [0, *DRIFT_MS]}))
    two_at_a_time(lambda cfg: run_perfbench("sweep", cfg, "--results", results, timeout=900), (step, drift))
    runs = Store(results).list_runs()
    assert all(r["status"] == "ok" for r in runs), [(r["run_id"], r.get("error")) for r in runs]
    by = lambda d: sorted((r for r in runs if r["settings"]["delay_ms"] == d), key=lambda r: r["timings"]["started"])  # noqa: E731
    return {"results": results, "clean": by(0), "slow": by(SLOW_MS), "drift": [by(d)[0] for d in DRIFT_MS]}


def history_of(pool, tmp_path, runs: list[dict]):
    """A results dir whose history holds `runs` in this order, labelled c00, c01, ... (the pool's store is
    copied so each scenario has its own history)."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(pool["results"], results, ignore=shutil.ignore_patterns("history"))
    for i, r in enumerate(runs):
        # in this process: ~20 of these per module, and `check` below keeps the real process and its exit status
        perfbench_in_process("history", "--add", r["run_id"], "--label", f"c{i:02d}", "--results", results)
    return results


def check(results, run: dict, label: str):
    r = run_perfbench(
        "check",
        "--history",
        "--current",
        run["run_id"],
        "--label",
        label,
        "--ignore-setting",
        "delay_ms",
        "--metric",
        "throughput",
        "--metric",
        "step_time_s",
        "--threshold",
        "20%",
        "--results",
        results,
        "--json",
        check=False,
    )
    assert r.returncode in (0, 1, 2), r.stderr
    return r.returncode, json.loads(r.stdout)


def test_slowdown_from_one_point_on_is_found_where_it_began(pool, tmp_path):
    results = history_of(pool, tmp_path, pool["clean"] + pool["slow"][:2])  # c00-c03 clean, c04-c05 slowed
    code, res = check(results, pool["slow"][2], "c06")
    assert code == 1 and res["verdict"] == "regression", res["history"]
    for j in res["history"]["results"]:
        assert j["verdict"] == "regression", j
        assert j["began_at"] == "c04" and j["method"] == "e-divisive", j  # the first slowed run
        assert j["confidence"] >= 0.9
    # `perfbench history` shows the same change point
    shown = json.loads(
        run_perfbench(
            "history", "--metric", "step_time_s", "--ignore-setting", "delay_ms", "--results", results, "--json"
        ).stdout
    )
    (ser,) = shown
    assert [c["began_at"] for c in ser["change_points"]] == ["c04"]
    assert [p["ref"] for p in ser["points"]] == [f"c{i:02d}" for i in range(7)]


def test_a_new_slowdown_at_the_current_commit_is_flagged_at_once(pool, tmp_path):
    results = history_of(pool, tmp_path, pool["clean"])
    code, res = check(results, pool["slow"][0], "new")
    assert code == 1, res["history"]
    tp = next(j for j in res["history"]["results"] if j["metric"] == "throughput")
    assert tp["verdict"] == "regression" and tp["began_at"] == "new"


def test_drift_is_found_within_the_drift(pool, tmp_path):
    results = history_of(pool, tmp_path, pool["clean"] + pool["drift"][:3])  # c04-c06 drift by 60, 120, 180 ms
    code, res = check(results, pool["drift"][3], "c07")
    assert code == 1, res["history"]
    for j in res["history"]["results"]:
        assert j["verdict"] == "regression", j
        assert j["began_at"] in ("c04", "c05", "c06"), j  # somewhere in the drift, not in the clean part


def test_a_clean_history_raises_nothing(pool, tmp_path):
    results = history_of(pool, tmp_path, pool["clean"][:3])
    code, res = check(results, pool["clean"][3], "c03")
    # no alarm: exit 0 and no regression anywhere. A clean run can really be faster: in CI on a quiet machine the
    # fourth clean run's median step was 5.8 ms against 9.6 ms (the tiny model's ~10 ms steps, 8 measured), and
    # the gate said "improvement" (+65% throughput, confidence 0.97), which is what the data says, not an alarm
    assert code == 0 and res["verdict"] in ("unchanged", "improvement"), res["history"]
    for j in res["history"]["results"]:
        assert j["verdict"] in ("unchanged", "improvement"), j
        if j["verdict"] == "unchanged":
            assert j["change_points"] == [], j
