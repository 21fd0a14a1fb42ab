"""`perfbench advise RUN --try N` without msrun: which findings are tried, the changed configuration, the measured
gain and its interval (hand-computed), the trials table, and the errors (unknown run, a run perfbench cannot
re-run). The whole path with real msrun runs is tests/integration/test_advise_try_msrun.py.

Advice rows are written by hand with the contract's columns (docs/advice.md: id, gain_ms, gain_share, basis,
symptom_of, try, predicted_step_ms next to rule, severity, message, evidence, ranks, stage)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from perfbench.run.advise_try import (
    CannotRerun,
    base_config,
    choose_findings,
    measured_gain,
    plan_change,
    rerun_problem,
    undotted,
)
from perfbench.run.config import parse_config
from perfbench.errors import ConfigError
from perfbench.store import Store
from tests.support import perfbench_in_process

CONTRACT = [
    "rule",
    "severity",
    "message",
    "evidence",
    "ranks",
    "stage",
    "id",
    "gain_ms",
    "gain_share",
    "basis",
    "symptom_of",
    "try",
    "predicted_step_ms",
]


def row(id_, gain, try_=None, symptom_of=None, rule=None):
    return {
        "rule": rule or id_.split(":")[0],
        "severity": "high",
        "message": f"finding {id_}",
        "evidence": "hand",
        "ranks": [],
        "stage": None,
        "id": id_,
        "gain_ms": gain,
        "gain_share": None if gain is None else gain / 100,
        "basis": "hand-made",
        "symptom_of": symptom_of,
        "try": None if try_ is None else json.dumps(try_),
        "predicted_step_ms": None if gain is None else 100 - gain,
    }


def advice(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=CONTRACT)


# ---- choosing findings ---------------------------------------------------------------------------------


def test_choose_takes_roots_with_a_knob_by_gain_largest_first():
    adv = advice(
        row("small_packets:all", 12.0, {"parallel.comm_fusion": "all"}),
        row("slow_rank:1", 30.0, {"inject.straggler_busy_ms": 0}),
        row("wait_ratio:0", 29.0, {"parallel.comm_fusion": 4}, symptom_of="slow_rank:1"),  # a symptom: never tried
        row("free_time:all", 50.0),  # the largest gain, but no knob
        row("stage_imbalance:1", None, {"parallel.micro_batches": 4}),  # unknown gain: after every known one
        row("exposed_communication:all", 12.0, {"parallel.grad_compression": "fp16"}),  # ties 12.0: table order
    )
    ids = [f["id"] for f in choose_findings(adv, 10)]
    assert ids == ["slow_rank:1", "small_packets:all", "exposed_communication:all", "stage_imbalance:1"]
    assert [f["id"] for f in choose_findings(adv, 2)] == ["slow_rank:1", "small_packets:all"]
    top = choose_findings(adv, 1)[0]
    assert top["try"] == {"inject.straggler_busy_ms": 0} and top["gain_ms"] == 30.0
    assert top["predicted_step_ms"] == 70.0 and top["rule"] == "slow_rank"


def test_choose_runs_one_knob_once_and_reads_a_round_tripped_table(tmp_path):
    adv = advice(
        row("a:1", 20.0, {"parallel.comm_fusion": "all"}),
        row("b:1", 10.0, {"parallel.comm_fusion": "all"}),
        row("c:1", 5.0, {"train.batch_size": 8}),
    )
    store = Store(tmp_path)
    store.write_table("r", "advice", adv)  # parquet: nulls and JSON text as the analysis stores them
    back = store.read_table("r", "advice")
    assert [f["id"] for f in choose_findings(back, 3)] == ["a:1", "c:1"]


def test_choose_on_advice_without_knobs_is_empty():
    old = pd.DataFrame(
        [{"rule": "slow_rank", "severity": "high", "message": "m", "evidence": "e", "ranks": [1], "stage": None}]
    )
    assert choose_findings(old, 2) == [] and choose_findings(None, 2) == []


# ---- the changed configuration -------------------------------------------------------------------------

TINY = {
    "name": "t",
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 6, "warmup_steps": 2},
    "profile": {"enabled": True, "steps": 2},
    "inject": {"straggler_rank": 1, "straggler_busy_ms": 80},
    "sweep": {"world_size": [2], "comm_fusion": [0]},
}


@pytest.fixture
def stored(tmp_path):
    """A run record as `perfbench sweep` stores it (settings and resolved config), without launching it."""
    cfg = parse_config(TINY)
    plan = cfg.plan("t-1")[0]
    rec = {
        "run_id": plan.run_id,
        "sweep_id": "t-1",
        "source": "sweep",
        "status": "ok",
        "settings": plan.settings,
        "config": dict(plan.run_config, output_dir="/x", threads_per_rank=1),
        "metrics": {"step_time_s": 0.1},
    }
    store = Store(tmp_path / "res")
    store.write_run(rec)
    store.write_sweep({"sweep_id": "t-1", "name": "t", "config": dict(TINY, launch={"timeout_s": 77})})
    return store, rec


def test_plan_change_is_the_run_with_only_that_knob_changed(stored):
    store, rec = stored
    cfg = base_config(store, rec)
    assert cfg.launch["timeout_s"] == 77  # the launch settings of the run's own sweep
    same = plan_change(cfg, rec, {}, "x-orig-r1", 1)
    fix = plan_change(cfg, rec, {"inject.straggler_busy_ms": 0, "parallel.comm_fusion": "all"}, "x-f1-r1", 1)
    strip = {"run_id", "repeat", "output_dir", "threads_per_rank", "profile"}
    want = {k: v for k, v in rec["config"].items() if k not in strip}
    assert {k: v for k, v in same.run_config.items() if k not in strip} == want
    want["inject"] = dict(want["inject"], straggler_busy_ms=0)
    want["parallel"] = dict(want["parallel"], comm_fusion="all")
    assert {k: v for k, v in fix.run_config.items() if k not in strip} == want
    assert fix.run_config["profile"]["enabled"] is False and same.run_config["profile"]["enabled"] is False
    assert fix.settings["comm_fusion"] == "all" and fix.settings["straggler_busy_ms"] == 0
    assert fix.run_config["world_size"] == 2 and fix.run_id == "x-f1-r1"


def test_plan_change_refuses_knobs_it_cannot_apply(stored):
    store, rec = stored
    cfg = base_config(store, rec)
    with pytest.raises(ConfigError, match=r"'launch.timeout_s' is not a key perfbench can change"):
        plan_change(cfg, rec, {"launch.timeout_s": 5}, "x", 1)
    with pytest.raises(ConfigError, match=r"'parallel.comm_fuson': parallel has no key 'comm_fuson'"):
        plan_change(cfg, rec, {"parallel.comm_fuson": "all"}, "x", 1)
    with pytest.raises(ConfigError, match=r"'train.comm_fusion': 'comm_fusion' is a key of parallel"):
        undotted({"train.comm_fusion": 4}, "resnet50")
    with pytest.raises(ConfigError, match=r"train.batch_size=4 is not divisible by parallel.micro_batches=3"):
        plan_change(cfg, rec, {"parallel.micro_batches": 3}, "x", 1)


def test_rerun_problem():
    assert rerun_problem({"run_id": "a", "source": "sweep", "config": {"workload": "moe", "world_size": 2}}) is None
    assert rerun_problem({"run_id": "a", "source": "tune", "config": {"workload": "moe", "world_size": 2}}) is None
    why = rerun_problem({"run_id": "imp", "source": "analyze", "config": {}})
    assert "run imp is an imported profile (source: analyze)" in why and "cannot re-run" in why
    assert "no stored configuration" in rerun_problem({"run_id": "a", "source": "sweep", "config": {}})


# ---- the measured gain and its interval ----------------------------------------------------------------


def test_measured_gain_and_welch_interval_by_hand():
    # base 100, 110; fix 60, 70: gain = 105 - 65 = 40 ms. Each side: variance 50, /n=2 -> 25; se = sqrt(50);
    # Welch dof = 50^2 / (25^2/1 + 25^2/1) = 2; t(0.975, 2) = 4.302653; half-width 4.302653 * 7.0710678 = 30.4250
    m = measured_gain([100.0, 110.0], [60.0, 70.0])
    assert m["gain_ms"] == pytest.approx(40.0)
    assert m["low_ms"] == pytest.approx(9.5750, abs=1e-3) and m["high_ms"] == pytest.approx(70.4250, abs=1e-3)
    assert (m["n_base"], m["n_fix"]) == (2, 2)
    # a fix that makes it slower: negative gain; 3 vs 2 values, unequal variances
    # base 50, 52, 54 (mean 52, var 4, /3 = 1.3333); fix 60, 64 (mean 62, var 8, /2 = 4); se = sqrt(5.3333) = 2.3094
    # dof = 5.3333^2 / (1.3333^2/2 + 4^2/1) = 28.444 / 16.889 = 1.6842; t(0.975, 1.6842) = 5.6473 (scipy)
    m = measured_gain([50.0, 52.0, 54.0], [60.0, 64.0])
    assert m["gain_ms"] == pytest.approx(-10.0)
    half = (m["high_ms"] - m["low_ms"]) / 2
    assert (m["high_ms"] + m["low_ms"]) / 2 == pytest.approx(-10.0)
    from scipy import stats

    assert half == pytest.approx(stats.t.ppf(0.975, 28.4444 / 16.8889) * 2.30940, rel=1e-3)


def test_measured_gain_with_one_run_a_side_has_no_interval_and_none_without_runs():
    m = measured_gain([120.0], [30.0])
    assert m["gain_ms"] == pytest.approx(90.0) and m["low_ms"] is None and m["high_ms"] is None
    m = measured_gain([120.0, 110.0], [])
    assert m["gain_ms"] is None and m["low_ms"] is None and m["n_base"] == 2 and m["n_fix"] == 0


# ---- the trials table ----------------------------------------------------------------------------------


def test_advice_trials_are_appended_and_read_back(tmp_path):
    store = Store(tmp_path)
    assert store.read_advice_trials().empty
    store.append_advice_trials(
        [{"of": "a", "finding": "slow_rank:1", "measured_gain_ms": 12.5, "predicted_gain_ms": None}]
    )
    store.append_advice_trials(
        [{"of": "b", "finding": "small_packets:all", "measured_gain_ms": None, "predicted_gain_ms": 3.0}]
    )
    df = store.read_advice_trials()
    assert list(df["of"]) == ["a", "b"] and df["measured_gain_ms"].iloc[0] == 12.5
    assert pd.isna(df["measured_gain_ms"].iloc[1]) and store.advice_trials_path == tmp_path / "advice" / "trials.jsonl"


# ---- errors through the command line -------------------------------------------------------------------


def test_advise_unknown_run_exits_2_naming_it(tmp_path):
    Store(tmp_path)
    r = perfbench_in_process("advise", "no-such-run", "--results", tmp_path, "--try", "1", check=False)
    assert r.returncode == 2 and "no run 'no-such-run'" in r.stderr


def test_try_on_an_imported_profile_says_so_and_still_prints_the_advice(imported_store):
    store = Store(imported_store)
    rec = next(r for r in store.list_runs() if r.get("source") == "analyze")
    n = len(store.read_table(rec["run_id"], "advice"))
    assert n > 0
    r = perfbench_in_process("advise", rec["run_id"], "--results", imported_store, "--try", "1", check=False)
    assert r.returncode == 2
    assert f"run {rec['run_id']} is an imported profile (source: analyze)" in r.stderr
    assert "cannot re-run" in r.stderr and r.stdout.strip()  # the advice is printed all the same
    j = perfbench_in_process("advise", rec["run_id"], "--results", imported_store, "--try", "1", "--json", check=False)
    assert j.returncode == 2 and len(json.loads(j.stdout)["advice"]) == n


def test_try_with_no_knob_in_the_advice_says_so(stored):
    store, rec = stored
    store.write_table(rec["run_id"], "advice", advice(row("free_time:all", 40.0)))
    r = perfbench_in_process("advise", rec["run_id"], "--results", store.root, "--try", "1", check=False)
    assert r.returncode == 2 and "no root finding carries a knob to try" in r.stderr
    j = perfbench_in_process("advise", rec["run_id"], "--results", store.root, "--try", "1", "--json", check=False)
    assert j.returncode == 2 and [a["id"] for a in json.loads(j.stdout)["advice"]] == ["free_time:all"]
    with pytest.raises(CannotRerun):
        from perfbench.run.advise_try import try_fixes

        try_fixes(store, dict(rec, source="analyze"), 1)


# ---- the injected causes' config -----------------------------------------------------------------------


def test_inject_straggler_and_input_delay_config():
    cfg = parse_config(dict(TINY, inject={"straggler_rank": 1, "straggler_busy_ms": 50, "input_delay_ms": 20}))
    plan = cfg.plan("s")[0]
    assert plan.run_config["inject"]["straggler_rank"] == 1 and plan.run_config["inject"]["input_delay_ms"] == 20
    with pytest.raises(ConfigError, match=r"inject.straggler_busy_ms: 50 is set but inject.straggler_rank is not"):
        parse_config(dict(TINY, inject={"straggler_busy_ms": 50}))
    with pytest.raises(ConfigError, match=r"inject.straggler_rank \(2\) must be less than world_size \(2\)"):
        parse_config(dict(TINY, inject={"straggler_rank": 2, "straggler_busy_ms": 50}))
    with pytest.raises(ConfigError, match=r"inject.input_delay_ms: -1 must be at least 0"):
        parse_config(dict(TINY, inject={"input_delay_ms": -1}))
    # a sweep axis: with and without the straggler
    cfg = parse_config(
        dict(TINY, inject={"straggler_rank": 0}, sweep={"world_size": [2], "straggler_busy_ms": [0, 50]})
    )
    assert [p.run_config["inject"]["straggler_busy_ms"] for p in cfg.plan("s")] == [0, 50]
    from perfbench.run.config_models import json_schema

    props = json_schema()["$defs"]["Inject"]["properties"]
    assert {"straggler_rank", "straggler_busy_ms", "input_delay_ms"} <= set(props)


def test_a_knob_that_breaks_a_rule_is_stored_failed_and_nothing_is_launched(stored):
    store, rec = stored
    from perfbench.run.advise_try import try_fixes

    tried = try_fixes(
        store, rec, 1, repeats=2, advice=advice(row("stage_imbalance:0", 20.0, {"parallel.micro_batches": 3}))
    )
    (fix,) = tried["fixes"]
    assert fix["status"] == "failed" and fix["measured_gain_ms"] is None and fix["predicted_gain_ms"] == 20.0
    assert (
        "cannot apply the knob" in fix["error"]
        and "train.batch_size=4 is not divisible by parallel.micro_batches=3" in fix["error"]
    )
    assert tried["original"]["runs"] == []  # nothing to compare with: the original is not re-run
    (run_id,) = fix["runs"]
    stored_fix = store.read_run(run_id)
    assert stored_fix["status"] == "failed" and stored_fix["source"] == "advise"
    assert stored_fix["advise"]["of"] == rec["run_id"] and stored_fix["advise"]["finding"] == "stage_imbalance:0"
    assert "micro_batches=3" in stored_fix["error"]
    assert list(store.read_advice_trials()["status"]) == ["failed"]
