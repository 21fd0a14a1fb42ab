"""tune's confirmation step (perfbench/tune/confirm.py) without msrun: which trials become candidates and which
one is picked, from re-measurements already in the store (the path a resumed search takes)."""

from __future__ import annotations

import optuna
import pytest

from perfbench.run.config import parse_config
from perfbench.store import Store
from perfbench.tune.confirm import candidates, confirm, confirm_run_id, skip_reason
from perfbench.tune.spec import SearchSpec

STUDY = "s-tune-1"


def study_of(values: list[tuple[dict, float, list[float]]]):
    """An in-memory study whose trials have these settings, values and constraint values."""
    study = optuna.create_study(direction="maximize")
    dist = optuna.distributions.CategoricalDistribution([8, 16, 32])
    for i, (settings, value, cons) in enumerate(values):
        study.add_trial(
            optuna.trial.create_trial(
                params={"batch_size": settings["batch_size"]},
                distributions={"batch_size": dist},
                value=value,
                user_attrs={"settings": settings, "run_id": f"{STUDY}-t{i:03d}", "constraints": cons},
            )
        )
    return study


def stored(
    store: Store,
    number: int,
    rnd: int,
    settings: dict,
    throughput: float | None,
    status="ok",
    extra: dict | None = None,
) -> None:
    store.write_run(
        {
            "run_id": confirm_run_id(STUDY, number, rnd, settings),
            "sweep_id": STUDY,
            "source": "tune",
            "status": status,
            "settings": settings,
            "metrics": dict({"throughput": throughput} if throughput is not None else {}, **(extra or {})),
            "tune": {"study": STUDY, "confirm_of": number, "round": rnd},
        }
    )


def stored_rounds(store: Store, a: dict, b: dict, pairs: list[tuple[float, float]]) -> None:
    """Re-measurements of trials 0 (settings a) and 1 (settings b), one (value of 0, value of 1) pair per round."""
    for rnd, (va, vb) in enumerate(pairs, 1):
        stored(store, 0, rnd, a, va)
        stored(store, 1, rnd, b, vb)


def test_candidates_are_the_best_distinct_feasible_trials():
    a, b, c = {"batch_size": 8}, {"batch_size": 16}, {"batch_size": 32}
    study = study_of([(a, 100.0, []), (b, 120.0, [0.5]), (c, 90.0, []), (a, 95.0, [])])  # b breaks a constraint
    got = [t.number for t in candidates(study, 2)]
    assert got == [0, 2]  # 100 then 90; b is infeasible; trial 3 repeats a's settings
    assert [t.number for t in candidates(study, 5)] == [0, 2]


def test_the_pick_is_the_best_median_of_trial_and_fresh_runs_not_the_luckiest_trial(tmp_path):
    a, b, c = {"batch_size": 8}, {"batch_size": 16}, {"batch_size": 32}
    # trial 0 was lucky (150 once); re-measured side by side it gives 60, 70, 65; trial 1 (125) gives 90, 80, 100
    study = study_of([(a, 150.0, []), (b, 125.0, []), (c, 50.0, [])])
    store = Store(tmp_path)
    stored_rounds(store, a, b, [(60.0, 90.0), (70.0, 80.0), (65.0, 100.0)])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16, 32]}})
    spec = SearchSpec.model_validate({"confirm": {"top": 3, "rounds": 3}})
    res = confirm(study, cfg, store, STUDY, spec, profile_last=True, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert set(rows) == {0, 1}  # trial 2 (50, 67% behind 150) is outside the default band of 25%
    assert rows[0]["values"] == [60.0, 70.0, 65.0] and rows[0]["median"] == 67.5  # median of 150, 60, 70, 65
    assert rows[1]["values"] == [90.0, 80.0, 100.0] and rows[1]["median"] == 95.0  # median of 125, 90, 80, 100
    assert rows[0]["trial_value"] == 150.0
    assert res["pick"] == 1
    assert res["profiled_run"] == confirm_run_id(STUDY, 1, 3, b)  # the pick's last round


def test_one_slow_re_measurement_does_not_flip_the_pick(tmp_path):
    # measured in the tune benchmark: a 65.4 among runs of 92-96 made the worse candidate the pick when only the
    # fresh runs voted (median of 65.4, 96.2 = 80.8 < 89.1); with the trial's own value it is the middle of three
    a, b = {"batch_size": 32}, {"batch_size": 16}
    study = study_of([(a, 91.5, []), (b, 83.9, [])])
    store = Store(tmp_path)
    stored_rounds(store, a, b, [(65.4, 88.0), (96.2, 90.2)])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [16, 32]}})
    res = confirm(study, cfg, store, STUDY, SearchSpec(), profile_last=False, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert rows[0]["median"] == 91.5 and rows[1]["median"] == 88.0
    assert res["pick"] == 0


@pytest.mark.parametrize(
    "direction,values,band,expected",
    [
        ("maximize", [100.0, 80.0, 74.0], 0.25, [0, 1]),  # 80 is 20% behind, 74 is 26% behind
        ("maximize", [100.0, 80.0, 74.0], 0.30, [0, 1, 2]),
        ("minimize", [1.0, 1.2, 1.3], 0.25, [0, 1]),  # step time: 1.2 is 20% slower, 1.3 is 30% slower
    ],
)
def test_only_contenders_within_the_band_are_candidates(direction, values, band, expected):
    study = optuna.create_study(direction=direction)
    dist = optuna.distributions.CategoricalDistribution([8, 16, 32])
    for i, (bs, v) in enumerate(zip([8, 16, 32], values)):
        study.add_trial(
            optuna.trial.create_trial(
                params={"batch_size": bs},
                distributions={"batch_size": dist},
                value=v,
                user_attrs={"settings": {"batch_size": bs}},
            )
        )
    assert [t.number for t in candidates(study, 5, band)] == expected


def test_a_single_contender_is_not_re_measured(tmp_path):
    # the default 30% behind the best is no contender: nothing to decide, no run launched (the store stays empty)
    study = study_of([({"batch_size": 8}, 67.0, []), ({"batch_size": 32}, 94.0, [])])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 32]}})
    store = Store(tmp_path)
    assert confirm(study, cfg, store, STUDY, SearchSpec(), profile_last=True, env_for=lambda plan: None) is None
    assert store.list_runs() == []


@pytest.mark.parametrize(
    ("values", "conf", "why"),
    [
        ([(8, 67.0), (32, 94.0)], {}, "no other trial within search.confirm.band (25%)"),
        ([(8, 90.0), (32, 94.0)], {"top": 1, "rounds": 1}, "search.confirm.top is 1: one contender"),
        ([(8, 90.0), (32, 94.0)], {"rounds": 0}, "search.confirm.rounds is 0: confirmation is off"),
        ([(8, 90.0), (8, 94.0)], {}, "only one trial with distinct settings"),
        ([(8, 90.0), (32, 94.0)], {}, None),  # two contenders: confirmed
    ],
)
def test_the_answer_says_why_nothing_was_re_measured(tmp_path, values, conf, why):
    study = study_of([({"batch_size": bs}, v, []) for bs, v in values])
    spec = SearchSpec.model_validate({"confirm": conf})
    reason = skip_reason(study, spec)
    assert (reason is None) == (why is None) and (why is None or why in reason), reason
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 32]}})
    if why is not None:  # the reason is given exactly when confirm re-measures nothing
        assert confirm(study, cfg, Store(tmp_path), STUDY, spec, profile_last=False, env_for=lambda p: None) is None


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


def test_an_unsteady_re_measurement_does_not_vote(tmp_path):
    a, b = {"batch_size": 8}, {"batch_size": 16}
    study = study_of([(a, 100.0, []), (b, 90.0, [])])
    store = Store(tmp_path)
    stored(store, 0, 1, a, 40.0, extra={"rank_cpu_spread": 0.54})  # ranks at two speeds: left out
    stored(store, 1, 1, b, 80.0, extra={"step_cpu_cv": 0.03, "step_time_cv": 0.5})  # wall clock only: votes
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16]}})
    spec = SearchSpec.model_validate({"confirm": {"top": 2, "rounds": 1}})
    res = confirm(study, cfg, store, STUDY, spec, profile_last=False, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert rows[0]["values"] == [] and list(rows[0]["unsteady"]) == [confirm_run_id(STUDY, 0, 1, a)]
    # its only fresh run unsteady: the trial's own 100 stands alone (flagged), and beats b's median of 90, 80
    assert rows[0]["median"] == 100.0 and rows[0]["unconfirmed"] is True
    assert rows[1]["values"] == [80.0] and rows[1]["median"] == 85.0 and "unconfirmed" not in rows[1]
    assert res["pick"] == 0


def test_a_steady_fresh_run_still_outvotes_an_unsteady_one_of_the_same_candidate(tmp_path):
    # two rounds for a: one unsteady (left out), one steady at 60: a = median(100, 60) = 80, confirmed; b = 85
    a, b = {"batch_size": 8}, {"batch_size": 16}
    study = study_of([(a, 100.0, []), (b, 90.0, [])])
    store = Store(tmp_path)
    stored(store, 0, 1, a, 40.0, extra={"rank_cpu_spread": 0.54})
    stored(store, 0, 2, a, 60.0)
    stored(store, 1, 1, b, 80.0)
    stored(store, 1, 2, b, 90.0)
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16]}})
    spec = SearchSpec.model_validate({"confirm": {"top": 2, "rounds": 2}})
    res = confirm(study, cfg, store, STUDY, spec, profile_last=False, env_for=lambda plan: None)
    rows = {r["number"]: r for r in res["candidates"]}
    assert rows[0]["values"] == [60.0] and rows[0]["median"] == 80.0 and "unconfirmed" not in rows[0]
    assert rows[1]["median"] == 90.0  # median of 90, 80, 90
    assert res["pick"] == 1


@pytest.mark.parametrize("conf", [{"top": 0}, {"rounds": 0}])
def test_confirmation_can_be_turned_off(tmp_path, conf):
    study = study_of([({"batch_size": 8}, 100.0, [])])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [8, 16]}})
    spec = SearchSpec.model_validate({"confirm": conf})
    assert confirm(study, cfg, Store(tmp_path), STUDY, spec, profile_last=False, env_for=lambda plan: None) is None


def test_the_last_round_profiles_the_leader_and_an_overturned_leader_leaves_the_pick_unprofiled(tmp_path):
    # going into round 2 (the last): a = median(100, 80) = 90 leads b = median(95, 84) = 89.5, so only a's
    # round-2 run is profiled; round 2 gives a 60 and b 99: a = median(100, 80, 60) = 80, b = 95 -> b is the pick,
    # it has no profiled run, and the search re-runs it with the profiler (perfbench/tune/search.py)
    a, b = {"batch_size": 32}, {"batch_size": 16}
    study = study_of([(a, 100.0, []), (b, 95.0, [])])
    store = Store(tmp_path)
    stored_rounds(store, a, b, [(80.0, 84.0), (60.0, 99.0)])
    cfg = parse_config({"name": "s", "workload": "resnet50", "sweep": {"batch_size": [16, 32]}})
    res = confirm(study, cfg, store, STUDY, SearchSpec(), profile_last=True, env_for=lambda plan: None)
    assert res["pick"] == 1 and res["profiled_run"] is None
    # the same runs with the leader winning: its last run is the profiled one
    store2 = Store(tmp_path / "2")
    stored_rounds(store2, a, b, [(80.0, 84.0), (92.0, 85.0)])
    res = confirm(study, cfg, store2, STUDY, SearchSpec(), profile_last=True, env_for=lambda plan: None)
    assert res["pick"] == 0 and res["profiled_run"] == confirm_run_id(STUDY, 0, 2, a)
