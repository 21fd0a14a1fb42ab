"""`perfbench baseline` / `perfbench check`: the decision rule on samples drawn from known distributions,
and the real CLI on real sweeps (the session's tiny sweep, plus a repeat of its 1-rank config and the
same config made slower on purpose with `inject.delay_ms`)."""

from __future__ import annotations

import copy
import json
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from perfbench.regress.check import decide_metric, parse_threshold
from perfbench.errors import UserError
from perfbench.store import Store
from tests.support import TINY_SWEEP, perfbench_in_process, run_perfbench, write_yaml

pytestmark = pytest.mark.timeout(2400)


# ---- the rule, on synthetic samples with a known truth ---------------------------------------------


def _entries(samples_per_repeat, metric="step_time_s"):
    return [{"samples": {metric: list(map(float, s))}, "metrics": {}} for s in samples_per_repeat]


def test_rule_same_distribution_is_unchanged_and_big_shift_is_regression():
    rng = np.random.default_rng(1)
    base = _entries([rng.normal(1.0, 0.05, 20), rng.normal(1.0, 0.05, 20)])
    same = _entries([rng.normal(1.0, 0.05, 20)])
    slow = _entries([rng.normal(1.3, 0.05, 20)])
    fast = _entries([rng.normal(0.7, 0.05, 20)])
    assert decide_metric("step_time_s", base, same, 0.05, 0.05)["verdict"] == "unchanged"
    r = decide_metric("step_time_s", base, slow, 0.05, 0.05)
    assert r["verdict"] == "regression" and 0.2 < r["change"] < 0.4
    assert decide_metric("step_time_s", base, fast, 0.05, 0.05)["verdict"] == "improvement"
    # throughput: higher is better, so a drop is the regression
    tb = _entries([rng.normal(100, 3, 20)], "throughput")
    tc = _entries([rng.normal(80, 3, 20)], "throughput")
    assert decide_metric("throughput", tb, tc, 0.05, 0.05)["verdict"] == "regression"
    assert decide_metric("throughput", tc, tb, 0.05, 0.05)["verdict"] == "improvement"


def test_rule_small_but_significant_change_stays_below_threshold():
    rng = np.random.default_rng(2)
    base = _entries([rng.normal(1.00, 0.005, 200)])
    cur = _entries([rng.normal(1.02, 0.005, 200)])  # +2%: certainly real, but under the 5% effect threshold
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["p_value"] < 1e-6 and r["verdict"] == "unchanged"
    assert decide_metric("step_time_s", base, cur, 0.01, 0.05)["verdict"] == "regression"


def test_rule_repeat_noise_raises_the_threshold():
    rng = np.random.default_rng(3)
    # two baseline repeats whose medians differ by ~30% (a busy machine); a +20% current run is inside that noise
    base = _entries([rng.normal(1.0, 0.02, 15), rng.normal(1.3, 0.02, 15)])
    cur = _entries([rng.normal(1.38, 0.02, 15)])
    r = decide_metric("step_time_s", base, cur, 0.05, 0.05)
    assert r["noise_floor"] > 0.25 and r["threshold_used"] == r["noise_floor"]
    assert r["verdict"] == "unchanged"
    far = _entries([rng.normal(2.5, 0.02, 15)])
    assert decide_metric("step_time_s", base, far, 0.05, 0.05)["verdict"] == "regression"


def test_rule_is_symmetric_for_higher_and_lower_is_better():
    """Doubling the step time and halving the throughput are the same slowdown, even when the repeat noise
    (here 1.6x between repeats) exceeds what a relative drop of throughput could ever reach (-100%)."""
    rng = np.random.default_rng(4)
    t_base = [rng.normal(1.0, 0.01, 15), rng.normal(1.6, 0.01, 15)]
    t_slow = [rng.normal(4.0, 0.01, 15)]
    assert decide_metric("step_time_s", _entries(t_base), _entries(t_slow), 0.05, 0.05)["verdict"] == "regression"
    x_base = _entries([8 / t for t in t_base], "throughput")
    x_slow = _entries([8 / t for t in t_slow], "throughput")
    r = decide_metric("throughput", x_base, x_slow, 0.05, 0.05)
    assert r["verdict"] == "regression" and r["change"] < -0.6
    assert decide_metric("throughput", x_slow, x_base, 0.05, 0.05)["verdict"] == "improvement"


def test_rule_too_few_samples_is_undecided():
    r = decide_metric("step_time_s", _entries([[1.0, 1.1]]), _entries([[2.0, 2.1]]), 0.05, 0.05)
    assert r["verdict"] == "undecided" and "too few" in r["reason"]
    r = decide_metric(
        "throughput", _entries([[1.0, 1.1, 1.2]], "throughput"), [{"samples": {}, "metrics": {}}], 0.05, 0.05
    )
    assert r["verdict"] == "undecided" and "current" in r["reason"]


def test_rule_zero_on_both_sides_is_unchanged():
    """1-rank runs have no communication: 0 vs 0 is unchanged, not undecided."""
    z = _entries([[0.0] * 7, [0.0] * 7], "communication_not_overlapped_s")
    assert decide_metric("communication_not_overlapped_s", z, z, 0.05, 0.05)["verdict"] == "unchanged"
    some = _entries([[0.01] * 7], "communication_not_overlapped_s")
    assert decide_metric("communication_not_overlapped_s", z, some, 0.05, 0.05)["verdict"] == "skipped"


def test_threshold_parsing():
    assert parse_threshold("5%") == pytest.approx(0.05)
    assert parse_threshold("0.1") == pytest.approx(0.1)
    assert parse_threshold("12") == pytest.approx(0.12)
    for bad in ("abc", "-5%", "0"):
        with pytest.raises(UserError):
            parse_threshold(bad)


# ---- the real CLI on real sweeps ---------------------------------------------------------------------


def _ws1_step_medians(results) -> list[float]:
    store = Store(results, create=False)
    out = []
    for rec in store.list_runs():
        if rec["status"] == "ok" and rec["settings"]["world_size"] == 1:
            ws = store.read_table(rec["run_id"], "workload_steps")
            steady = ws[ws["step"] >= rec["config"]["train"]["warmup_steps"]]
            out.append(float(steady.groupby("step")["step_time_s"].max().median()))
    return out


@pytest.fixture(scope="module")
def check_store(sweep_store, tmp_path_factory):
    """A copy of the session sweep (records and tables) plus two more real 1-rank sweeps of the same config:
    `again` (2 more repeats, nothing changed) and `slow` (every rank sleeps per step: a real slowdown)."""
    base = tmp_path_factory.mktemp("check_store")
    results = base / "results"
    shutil.copytree(sweep_store, results, ignore=shutil.ignore_patterns("artifacts"))
    assert _ws1_step_medians(results), "the session sweep has no finished 1-rank run"
    again = copy.deepcopy(TINY_SWEEP)
    again.update(name="again", sweep={"world_size": [1]}, repeats=2)
    again["launch"] = {**again.get("launch", {}), "master_port": "auto"}
    run_perfbench("sweep", write_yaml(base / "again.yaml", again), "--results", results, timeout=1500)
    slow = copy.deepcopy(again)
    slow.update(name="slow", repeats=1)
    slow["launch"] = {**slow["launch"], "master_port": "auto"}
    # slower by far more than this machine's repeat-to-repeat noise: 2x the slowest baseline repeat's median step,
    # the `again` repeats included (measured just before, under the load the slow run will meet; capped so a very
    # busy machine does not make the test take forever; 8 s is still > 2x any step seen here)
    delay_ms = int(min(8000.0, max(300.0, 2000.0 * max(_ws1_step_medians(results)))))
    slow["inject"] = {"delay_ms": delay_ms}
    run_perfbench("sweep", write_yaml(base / "slow.yaml", slow), "--results", results, timeout=1500)
    store = Store(results, create=False)
    sweeps = {s["sweep_id"].split("-")[0]: s["sweep_id"] for s in store.list_sweeps()}
    return {"results": results, "sweeps": sweeps, "delay_ms": delay_ms, "store": store}


# `baseline save` runs in this process (perfbench_in_process): it is set-up here; `check` keeps the real process,
# whose exit status and stderr are what these tests are about, and the bad-input test saves through it too


def _check(results, baseline, current, *extra):
    return run_perfbench(
        "check", "--baseline", baseline, "--current", current, "--results", results, *extra, check=False, timeout=300
    )


@pytest.mark.msrun
def test_identical_results_are_unchanged(check_store, tmp_path):
    res, tiny = check_store["results"], check_store["sweeps"]["tiny"]
    perfbench_in_process("baseline", "save", tiny, "--name", "tiny-identical", "--results", res)
    junit = tmp_path / "check.xml"
    r = _check(res, "tiny-identical", tiny, "--junit", junit, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    verdicts = [m["verdict"] for g in doc["groups"] for m in g["metrics"] if m["verdict"] != "skipped"]
    assert verdicts and set(verdicts) == {"unchanged"}
    for g in doc["groups"]:
        for m in g["metrics"]:
            if m["verdict"] == "unchanged":
                assert m["change"] == pytest.approx(0.0, abs=1e-12)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "0" and int(suite.get("tests")) >= len(verdicts)


@pytest.mark.msrun
def test_repeat_noise_does_not_trip_the_default_threshold(check_store):
    res, tiny, again = check_store["results"], check_store["sweeps"]["tiny"], check_store["sweeps"]["again"]
    perfbench_in_process("baseline", "save", tiny, "--name", "tiny", "--results", res)
    r = _check(res, "tiny", again)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(_check(res, "tiny", again, "--json").stdout)
    (grp,) = [g for g in doc["groups"] if g["metrics"]]  # only world_size 1 was repeated
    assert grp["settings"]["world_size"] == 1 and len(grp["current_runs"]) == 2
    step = next(m for m in grp["metrics"] if m["metric"] == "step_time_s")
    # measured steps (docs/concepts.md): after warm-up and outside the profiled window, pooled over 2 repeats
    t = TINY_SWEEP["train"]
    per_run = t["steps"] - t["warmup_steps"] - TINY_SWEEP["profile"]["steps"]
    assert step["n_baseline"] == 2 * per_run and step["n_current"] == 2 * per_run
    assert {m["verdict"] for m in grp["metrics"]} <= {"unchanged", "improvement", "skipped"}


@pytest.mark.msrun
def test_slowed_run_is_a_regression(check_store, tmp_path):
    res, slow = check_store["results"], check_store["sweeps"]["slow"]
    perfbench_in_process("baseline", "save", check_store["sweeps"]["tiny"], "--name", "tiny-for-slow", "--results", res)
    junit = tmp_path / "slow.xml"
    summary = tmp_path / "summary.md"
    r = _check(res, "tiny-for-slow", slow, "--junit", junit, "--summary", summary)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "regression" in r.stdout and summary.read_text().strip() == r.stdout.strip()
    doc = json.loads(_check(res, "tiny-for-slow", slow, "--json").stdout)
    (grp,) = [g for g in doc["groups"] if g["metrics"]]
    by = {m["metric"]: m for m in grp["metrics"]}
    assert by["step_time_s"]["verdict"] == "regression" and by["throughput"]["verdict"] == "regression"
    # the measured slowdown is about the injected delay: compare with the tables, not with our own output
    store = check_store["store"]
    slow_run = store.list_runs(sweep=slow)[0]
    ws = store.read_table(slow_run["run_id"], "workload_steps")
    assert ws["step_time_s"].min() >= check_store["delay_ms"] / 1000 * 0.95
    assert by["step_time_s"]["current"] >= check_store["delay_ms"] / 1000
    failures = ET.parse(junit).getroot().find("testsuite").findall("testcase/failure")
    assert {f.get("message").split(":")[0] for f in failures} >= {"step_time_s", "throughput"}


@pytest.mark.msrun
def test_single_run_baseline_against_the_slow_run(check_store):
    res = check_store["results"]
    store = check_store["store"]
    base_run = next(r for r in store.list_runs(sweep=check_store["sweeps"]["again"]) if r["status"] == "ok")
    slow_run = store.list_runs(sweep=check_store["sweeps"]["slow"])[0]
    perfbench_in_process("baseline", "save", base_run["run_id"], "--name", "one-run", "--results", res)
    assert _check(res, "one-run", slow_run["run_id"]).returncode == 1
    # and the baseline itself, checked against its own run, is unchanged
    assert _check(res, "one-run", base_run["run_id"]).returncode == 0


@pytest.mark.msrun
def test_bad_input_exits_2_with_a_clear_message(check_store):
    res, tiny = check_store["results"], check_store["sweeps"]["tiny"]
    r = _check(res, "no-such-baseline", tiny)
    assert r.returncode == 2 and "no baseline 'no-such-baseline'" in r.stderr and "Traceback" not in r.stderr
    r = _check(res, "../etc/passwd", tiny)
    assert r.returncode == 2 and "bad baseline name" in r.stderr
    perfbench_in_process("baseline", "save", tiny, "--name", "for-bad-input", "--results", res)
    r = _check(res, "for-bad-input", "no-such-run")
    assert r.returncode == 2 and "no run or sweep 'no-such-run'" in r.stderr and "Traceback" not in r.stderr
    r = _check(res, "for-bad-input", tiny, "--threshold", "lots")
    assert r.returncode == 2 and "--threshold" in r.stderr
    r = run_perfbench("baseline", "save", "no-such-run", "--name", "x", "--results", res, check=False)
    assert r.returncode == 2 and "no run or sweep" in r.stderr
    r = _check(res / "nowhere", "for-bad-input", tiny)
    assert r.returncode == 2 and "no results at" in r.stderr
    # a corrupt baseline file names the file
    (res / "baselines" / "broken.json").write_text("{not json")
    r = _check(res, "broken", tiny)
    assert r.returncode == 2 and "broken.json" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.msrun
def test_failed_current_runs_cannot_be_decided(check_store, tmp_path):
    """A current result whose runs all failed is exit 2 (could not decide), not a pass."""
    res = tmp_path / "results"
    shutil.copytree(check_store["results"], res)
    store = Store(res, create=False)
    perfbench_in_process("baseline", "save", check_store["sweeps"]["tiny"], "--name", "tiny", "--results", res)
    rec = store.list_runs(sweep=check_store["sweeps"]["slow"])[0]
    rec["status"], rec["error"] = "failed", "rank 0 failed (msrun exit code 1)"
    store.write_run(rec)
    r = _check(res, "tiny", check_store["sweeps"]["slow"])
    assert r.returncode == 2 and "every current run failed" in r.stdout
