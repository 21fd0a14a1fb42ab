"""`perfbench tune`'s config: range axes `{low, high, log, step}`, the `search:` section, the search space
(no MindSpore, no msrun)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from perfbench.run.config import load_config, parse_config
from perfbench.errors import ConfigError
from perfbench.tune.search import default_point, search_space, space_size, suggest
from perfbench.tune.spec import default_trials, direction
from tests.support import ROOT

BASE = {"workload": "resnet50", "train": {"steps": 10, "warmup_steps": 2}, "profile": {"steps": 4}}


def raw(**over):
    r = yaml.safe_load(yaml.safe_dump(BASE))
    r.update(over)
    return r


def error_of(r) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(r)
    return str(exc.value)


def test_stepped_range_is_listed_for_a_sweep():
    c = parse_config(raw(sweep={"batch_size": {"low": 4, "high": 16, "step": 4}, "comm_fusion": [0, "all"]}))
    assert c.sweep["batch_size"] == [4, 8, 12, 16]
    assert len(c.plan()) == 8  # 4 batch sizes x 2 fusion settings
    f = parse_config(raw(sweep={"compression_ratio": {"low": 0.1, "high": 0.3, "step": 0.1}}))
    assert f.sweep["compression_ratio"] == pytest.approx([0.1, 0.2, 0.3])


def test_range_without_step_can_be_tuned_but_not_swept():
    c = parse_config(raw(sweep={"compression_ratio": {"low": 0.01, "high": 0.5, "log": True}}))
    with pytest.raises(ConfigError, match=r"sweep.compression_ratio: .*no `step`.*perfbench tune"):
        c.plan()
    space = search_space(c)
    assert space_size(space) == float("inf")
    assert default_point(c)["compression_ratio"] == 0.01


@pytest.mark.parametrize(
    "rng, message",
    [
        ({"low": 8}, r"sweep.batch_size: a range needs `low` and `high`"),
        ({"low": 8, "high": 4}, r"sweep.batch_size.high: 4 must be greater than low \(8\)"),
        ({"low": 4, "high": 8, "stepp": 2}, r"sweep.batch_size.stepp: unknown key \(did you mean `step`\?\)"),
        ({"low": 4, "high": 8, "step": 0}, r"sweep.batch_size.step: 0 must be greater than 0"),
        ({"low": 4, "high": 8, "step": 2, "log": True}, r"`log: true` and `step` cannot be combined"),
        ({"low": 0, "high": 8, "log": True}, r"sweep.batch_size.low: 0 must be greater than 0 with `log: true`"),
        ({"low": 0, "high": 8}, r"sweep.batch_size: 0 must be at least 1"),  # the ends obey the key's own rules
    ],
)
def test_bad_ranges_name_the_key(rng, message):
    assert pytest.raises(ConfigError, parse_config, raw(sweep={"batch_size": rng})).match(message)


@pytest.mark.parametrize(
    "search, message",
    [
        ({"strategy": "bayes"}, r"search.strategy: 'bayes'"),
        ({"pruner": "median"}, r"search.pruner: 'median'"),
        ({"budget": {"trials": 0}}, r"search.budget.trials: 0"),
        ({"objective": "speed"}, r"search.objective: 'speed'.*not a metric of the catalogue"),
        ({"trails": 3}, r"search.trails"),
        ({"constraints": [{"metric": "comm_share"}]}, r"needs `min` or `max`"),
        ({"constraints": [{"metric": "nope", "max": 1}]}, r"'nope' is not a metric of the catalogue"),
    ],
)
def test_bad_search_section_names_the_key(search, message):
    assert pytest.raises(ConfigError, parse_config, raw(sweep={"batch_size": [4, 8]}, search=search)).match(message)


def test_grid_needs_listable_ranges():
    msg = error_of(raw(sweep={"compression_ratio": {"low": 0.01, "high": 0.5}}, search={"strategy": "grid"}))
    assert "sweep.compression_ratio" in msg and "grid" in msg


def test_objective_direction_follows_the_metric():
    # faster is more samples per second but fewer seconds per step
    assert direction("throughput") == "maximize"
    assert direction("step_time_s") == "minimize"
    spec = parse_config(raw(sweep={"batch_size": [4, 8]}, search={"objective": "step_time_s"})).search
    assert spec.objective == "step_time_s" and spec.strategy == "tpe" and spec.pruner == "successive_halving"


def test_default_budget_is_a_fraction_of_the_space():
    assert default_trials(24) == 6  # a quarter
    assert default_trials(4) == 4  # a tiny space: all of it
    assert default_trials(16) == 6  # never fewer than 6 where the space allows
    assert default_trials(400) == 40


def test_space_and_suggestions_stay_inside_the_axes():
    import optuna

    c = parse_config(
        raw(
            sweep={
                "world_size": [2],
                "comm_fusion": [0, 4, "all"],
                "batch_size": {"low": 2, "high": 64, "log": True},
                "layers": [[1, 1, 1, 1], [2, 2, 2, 2]],
            }
        )
    )
    space = search_space(c)
    assert set(space) == {"comm_fusion", "batch_size", "layers"}  # a single-value axis is fixed, not searched
    assert default_point(c) == {"world_size": 2, "comm_fusion": 0, "batch_size": 2, "layers": [1, 1, 1, 1]}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = []
    for _ in range(20):
        t = study.ask()
        p = suggest(t, space)
        study.tell(t, 0.0)
        seen.append(p)
        assert p["comm_fusion"] in (0, 4, "all")
        assert isinstance(p["batch_size"], int) and 2 <= p["batch_size"] <= 64
        assert p["layers"] in ([1, 1, 1, 1], [2, 2, 2, 2])  # list values survive Optuna's categorical choices
    assert len({p["batch_size"] for p in seen}) > 5


def test_example_tune_config_is_valid():
    c = load_config(ROOT / "examples" / "tune-resnet50.yaml")
    assert space_size(search_space(c)) == 24
    assert c.search.constraints == ["loss_decreases"]


def test_tune_reports_a_bad_config_in_one_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(raw(sweep={"batch_size": {"low": 8, "high": 4}})))
    r = subprocess.run(
        [sys.executable, "-m", "perfbench", "tune", str(p), "--results", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "perfbench: error: sweep.batch_size.high: 4 must be greater than low (8)"


def test_nothing_to_tune_is_a_user_error(tmp_path):
    p = tmp_path / "flat.yaml"
    p.write_text(yaml.safe_dump(raw(sweep={"world_size": [1]})))
    r = subprocess.run(
        [sys.executable, "-m", "perfbench", "tune", str(p), "--results", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "nothing to tune" in r.stderr and "Traceback" not in r.stderr
