"""tune's confirmation step (perfbench/tune_confirm.py) without msrun: which trials become candidates and which
one is picked, from re-measurements already in the store (the path a resumed search takes)."""

from __future__ import annotations

import optuna
import pytest

from perfbench.config import parse_config
from perfbench.store import Store
from perfbench.tune_confirm import candidates, confirm, confirm_run_id
from perfbench.tune_spec import SearchSpec

STUDY = "s-tune-1"


def study_of(values: list[tuple[dict, float, list[float]]]):
    """An in-memory study whose trials have these settings, values and constraint values."""
    study = optuna.create_study(direction="maximize")
    dist = optuna.distributions.CategoricalDistribution([8, 16, 32])
    for i, (settings, value, cons) in enumerate(values):
        study.add_trial(optuna.trial.create_trial(
            params={"batch_size": settings["batch_size"]}, distributions={"batch_size": dist}, value=value,
            user_attrs={"settings": settings, "run_id": f"{STUDY}-t{i:03d}", "constraints": cons}))
    return study


def stored(store: Store, number: int, rnd: int, settings: dict, throughput: float | None, status="ok") -> None:
    store.write_run({"run_id": confirm_run_id(STUDY, number, rnd, settings), "sweep_id": STUDY, "source": "tune",
                     "status": status, "settings": settings,
                     "metrics": {"throughput": throughput} if throughput is not None else {},
                     "tune": {"study": STUDY, "confirm_of": number, "round": rnd}})


def test_candidates_are_the_best_distinct_feasible_trials():
    a, b, c = {"batch_size": 8}, {"batch_size": 16}, {"batch_size": 32}
    study = study_of([(a, 100.0, []), (b, 120.0, [0.5]), (c, 90.0, []), (a, 95.0, [])])  # b breaks a constraint
    got = [t.number for t in candidates(study, 2)]
    assert got == [0, 2]  # 100 then 90; b is infeasible; trial 3 repeats a's settings
    assert [t.number for t in candidates(study, 5)] == [0, 2]


def test_the_pick_is_the_best_median_of_the_fresh_runs_not_the_luckiest_trial(tmp_path):
    a, b, c = {"batch_size": 8}, {"batch_size": 16}, {"batch_size": 32}
    # trial 0 was lucky (150 once); re-measured side by side it gives 60, 70, 65; trial 1 gives 90, 80, 100
    study = study_of([(a, 150.0, []), (b, 100.0, []), (c, 50.0, [])])
    store = Store(tmp_path)
    for rnd, (va, vb) in enumerate([(60.0, 90.0), (70.0, 80.0), (65.0, 100.0)], 1):
        stored(store, 0, rnd, a, va)
        stored(store, 1, rnd, b, vb)
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16, 32]}})
    spec = SearchSpec.model_validate({"confirm": {"top": 2, "rounds": 3}})
    res = confirm(study, cfg, store, STUDY, spec, profile_last=True, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert set(rows) == {0, 1}  # trial 2 (50) is not a candidate
    assert rows[0]["values"] == [60.0, 70.0, 65.0] and rows[0]["median"] == 65.0
    assert rows[1]["values"] == [90.0, 80.0, 100.0] and rows[1]["median"] == 90.0
    assert rows[0]["trial_value"] == 150.0  # shown, but it does not vote
    assert res["pick"] == 1
    assert res["profiled_run"] == confirm_run_id(STUDY, 1, 3, b)  # the pick's last round


def test_a_re_measurement_without_a_value_does_not_count(tmp_path):
    a, b = {"batch_size": 8}, {"batch_size": 16}
    study = study_of([(a, 100.0, []), (b, 90.0, [])])
    store = Store(tmp_path)
    stored(store, 0, 1, a, None)  # e.g. a run whose ranks recorded no measured step
    stored(store, 1, 1, b, 80.0)
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16]}})
    spec = SearchSpec.model_validate({"confirm": {"top": 2, "rounds": 1}})
    res = confirm(study, cfg, store, STUDY, spec, profile_last=False, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert rows[0]["values"] == [] and rows[0]["median"] is None
    assert res["pick"] == 1 and res["profiled_run"] is None


@pytest.mark.parametrize("conf", [{"top": 0}, {"rounds": 0}])
def test_confirmation_can_be_turned_off(tmp_path, conf):
    study = study_of([({"batch_size": 8}, 100.0, [])])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16]}})
    spec = SearchSpec.model_validate({"confirm": conf})
    assert confirm(study, cfg, Store(tmp_path), STUDY, spec, profile_last=False, env_for=lambda plan: None) is None
