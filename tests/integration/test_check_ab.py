"""`perfbench check --ab`: the paired decision (perfbench.regress.ab.decide_paired) on hand-computed cases, and the
job's order and re-measurement (perfbench.regress.ab.run_ab) with sides that need no msrun."""

from __future__ import annotations

import math

import pytest

from perfbench.regress.ab import decide_paired, run_ab
from perfbench.store import Store

E = math.exp


def step_pairs(logs, base=1.0):
    """(baseline, candidate) step times whose log ratios are `logs`."""
    return [(base, base * E(d)) for d in logs]


def test_regression_ten_percent_slower_every_pair():
    # d = 0.10, 0.12, 0.08, 0.10: mean 0.10; deviations 0, .02, -.02, 0 -> ss .0008, s = sqrt(.0008 / 3) = .016330
    # se = .016330 / 2 = .0081650; t = .10 / .0081650 = 12.247, df 3
    # df 3 closed form: p = 1 - (2/pi)(theta + sin theta cos theta), theta = atan(t / sqrt 3) = atan(7.0711)
    #   = pi/2 - atan(.141421) = 1.570796 - .140489 = 1.430307; sin cos = tan / (1 + tan^2) = 7.0711 / 51 = .138648
    #   p = 1 - .636620 * 1.568955 = .001172
    # change = e^.10 - 1 = 10.52% > 5%; 95% interval: t(.975, 3) = 3.1824, half width 3.1824 * .0081650 = .025985
    #   -> e^.074015 - 1 = 7.68%, e^.125985 - 1 = 13.43%
    m = decide_paired("step_time_s", step_pairs([0.10, 0.12, 0.08, 0.10]), 0.05, 0.05)
    assert m["verdict"] == "regression"
    assert m["n_pairs"] == 4
    assert m["p_value"] == pytest.approx(0.001172, rel=0.005)
    assert m["change"] == pytest.approx(0.10517, rel=1e-3)
    assert m["worse_by"] == pytest.approx(0.10517, rel=1e-3)
    assert m["change_ci"][0] == pytest.approx(0.0768, abs=2e-4)
    assert m["change_ci"][1] == pytest.approx(0.1343, abs=2e-4)


def test_throughput_is_turned_so_that_lower_is_worse():
    # baseline 100, candidate 100 e^-d: d = ln(b / c) as above -> regression, change e^-.10 - 1 = -9.52%
    pairs = [(100.0, 100.0 * E(-d)) for d in (0.10, 0.12, 0.08, 0.10)]
    m = decide_paired("throughput", pairs, 0.05, 0.05)
    assert m["verdict"] == "regression"
    assert m["change"] == pytest.approx(E(-0.10) - 1, rel=1e-3)
    assert m["worse_by"] == pytest.approx(E(0.10) - 1, rel=1e-3)
    assert m["p_value"] == pytest.approx(0.001172, rel=0.005)


def test_improvement_is_the_mirror_image():
    m = decide_paired("step_time_s", step_pairs([-0.10, -0.12, -0.08, -0.10]), 0.05, 0.05)
    assert m["verdict"] == "improvement"
    assert m["worse_by"] == pytest.approx(-(E(0.10) - 1), rel=1e-3)


def test_significant_but_smaller_than_the_threshold_is_unchanged():
    # d = .020, .021, .019, .020: s = sqrt(2e-6 / 3) = 8.165e-4, se 4.082e-4, t = 49.0 (p ~ 2e-5): significant,
    # but e^.02 - 1 = 2.02% <= 5%
    m = decide_paired("step_time_s", step_pairs([0.020, 0.021, 0.019, 0.020]), 0.05, 0.05)
    assert m["p_value"] < 0.001
    assert m["verdict"] == "unchanged"
    assert "≤ 5%" in m["reason"]


def test_large_but_noisy_is_unchanged():
    # d = .30, -.10, .25, -.05: mean .10; deviations .2, -.2, .15, -.15 -> ss .125, s = sqrt(.125 / 3) = .20412,
    # se .10206, t = .97980, theta = atan(.97980 / 1.7321) = atan(.56569) = .51480, sin cos = .56569 / 1.32 = .42855
    # p = 1 - .63662 * .94335 = .39944 >= .05 -> unchanged although e^.1 - 1 = 10.5%
    m = decide_paired("step_time_s", step_pairs([0.30, -0.10, 0.25, -0.05]), 0.05, 0.05)
    assert m["verdict"] == "unchanged"
    assert m["p_value"] == pytest.approx(0.3994, rel=0.01)


def test_identical_pairs_are_unchanged_and_too_few_pairs_undecided():
    m = decide_paired("step_time_s", [(1.0, 1.0)] * 4, 0.05, 0.05)
    assert m["verdict"] == "unchanged" and m["p_value"] == 1.0
    m = decide_paired("step_time_s", [(1.0, 1.2), (1.0, 1.2), (1.0, None), (0.0, 1.0)], 0.05, 0.05)
    assert m["verdict"] == "undecided"
    assert (m["n_pairs"], m["pairs_left_out"]) == (2, 2)


class FakeSides:
    """Sides whose runs fail (no msrun): the job's order and its re-measurement budget."""

    def __init__(self):
        self.calls = []

    def settings(self, side):
        return {"side": side}

    def run(self, store, ab_id, side, pair, attempt):
        self.calls.append((pair, attempt, side))
        return {"run_id": None, "status": "failed", "error": "no run", "metrics": {}}


def test_order_alternates_and_failed_pairs_are_measured_again_within_the_budget(tmp_path):
    sides = FakeSides()
    res = run_ab(Store(tmp_path / "r"), sides, pairs=3, remeasure=2, threshold=0.05, alpha=0.05)
    # pair 0 (A B) fails and is measured again twice (the budget), then kept; pairs 1 (B A), 2 (A B) once each
    assert sides.calls == [
        (0, 0, "baseline"),
        (0, 0, "candidate"),
        (0, 1, "baseline"),
        (0, 1, "candidate"),
        (0, 2, "baseline"),
        (0, 2, "candidate"),
        (1, 0, "candidate"),
        (1, 0, "baseline"),
        (2, 0, "baseline"),
        (2, 0, "candidate"),
    ]
    assert [r["order"] for r in res["pairs"]] == ["AB", "AB", "AB", "BA", "AB"]
    assert [bool(r.get("replaced")) for r in res["pairs"]] == [True, True, False, False, False]
    assert res["verdict"] == "undecided" and res["exit_code"] == 2


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--set", "nonsense=3"], "'nonsense' is not a key a sweep can vary"),
        (["--set", "parallel.busy_ms=3"], "'busy_ms' is in section 'inject', not 'parallel'"),
        (["--set", "busy_ms"], "expected KEY=VALUE"),
        (["--set", "busy_ms=-1"], "check --ab candidate"),
        (["--pairs", "2"], "bad --pairs 2"),
        (["--current", "x"], "leave out --baseline, --current and --history"),
        (["--baseline-cmd", "true"], "give both --baseline-cmd and --candidate-cmd"),
    ],
)
def test_ab_bad_input_is_one_line_naming_it(tmp_path, extra, says):
    from tests.support import perfbench_in_process, write_yaml

    cfg = write_yaml(tmp_path / "c.yaml", {"name": "c", "workload": "resnet50"})
    r = perfbench_in_process("check", "--ab", cfg, *extra, "--results", tmp_path / "r", check=False)
    assert r.returncode == 2
    assert says in r.stderr and "Traceback" not in r.stderr


def test_ab_needs_a_config_with_one_point(tmp_path):
    from tests.support import perfbench_in_process, write_yaml

    cfg = write_yaml(tmp_path / "c.yaml", {"name": "c", "workload": "resnet50", "sweep": {"world_size": [1, 2]}})
    r = perfbench_in_process("check", "--ab", cfg, "--set", "busy_ms=1", "--results", tmp_path / "r", check=False)
    assert r.returncode == 2 and "needs a config with one point" in r.stderr and "has 2" in r.stderr
    r = perfbench_in_process(
        "check", "--set", "busy_ms=1", "--current", "x", "--baseline", "b", "--results", tmp_path / "r", check=False
    )
    assert r.returncode == 2 and "only apply with --ab" in r.stderr


@pytest.mark.msrun
@pytest.mark.timeout(1800)
def test_ab_job_with_real_runs_finds_an_injected_cpu_slowdown(tmp_path):
    """6 tiny real runs (3 pairs, no re-measurement): the candidate burns 150 ms of CPU per step (inject.busy_ms),
    ~8x the tiny model's own CPU time per step, so CPU time per step regresses under any load."""
    import json
    import xml.etree.ElementTree as ET

    from tests.support import run_perfbench, write_yaml

    cfg = write_yaml(
        tmp_path / "tiny.yaml",
        {
            "name": "abt",
            "workload": "resnet50",
            "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
            "train": {"batch_size": 4, "steps": 8, "warmup_steps": 2, "seed": 0},
            "profile": {"enabled": False},
        },
    )
    res, junit = tmp_path / "r", tmp_path / "ab.xml"
    r = run_perfbench(
        "check",
        "--ab",
        cfg,
        "--set",
        "inject.busy_ms=150",
        "--pairs",
        3,
        "--remeasure",
        0,
        "--results",
        res,
        "--junit",
        junit,
        "--json",
        check=False,
        timeout=1500,
    )
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [p["order"] for p in doc["pairs"]] == ["AB", "BA", "AB"]
    by = {m["metric"]: m for m in doc["groups"][0]["metrics"]}
    assert by["step_cpu_s"]["verdict"] == "regression" and by["step_cpu_s"]["n_pairs"] == 3
    # each pair's fastest measured steps differ by about the injected 150 ms of CPU (the runs' own step records, not
    # our output; fastest, because a loaded machine inflates some steps' CPU time: seen 19 -> 96 ms in a clean run)
    store = Store(res, create=False)
    for p in doc["pairs"]:
        a, b = (store.read_run(p[k]) for k in ("baseline_run", "candidate_run"))
        assert a["source"] == b["source"] == "ab" and b["settings"]["busy_ms"] == 150
        fastest = [
            float(ws.loc[ws["step"] >= 2, "cpu_s"].min())
            for ws in (store.read_table(r["run_id"], "workload_steps") for r in (a, b))
        ]
        assert 0.12 < fastest[1] - fastest[0] < 0.20
    suite = ET.parse(junit).getroot().find("testsuite")
    assert int(suite.get("failures")) >= 1
