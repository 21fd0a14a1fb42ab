"""Advice gains on every multi-rank shared fixture: the root gains add up to no more than the
step's exposed communication + idle + imbalance time (computed here from what `analyze --json` reports per
rank and stage, not from analyzers.analyses.advice), no more than the step, no two roots draw on the same time beyond
what it holds, and on set G (4 ranks, 2 pipeline stages) the stage imbalance is the top root with the
rank imbalance and the wait ratios folded under it."""

from __future__ import annotations

import shutil
import statistics

import pytest

from tests.support import fixture_path
from tests.support.golden import analyze_json

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
C = ("Ascend__msinsight", "test", "data", "pytorch", "db")
E = ("Ascend__msprof-analyze", "test", "resource", "advisor", "cluster_analysis_output")
F = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler")
G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")

CASES = {
    "B-level1": B + ("level1",),
    "B-level2": B + ("level2",),
    "C-level1": C + ("level1",),
    "C-level2": C + ("level2",),
    "E": E,
    "F": F,
    "G": G,
}


def _copy(tmp_path, name, parts):
    d = tmp_path / name
    if name == "F":  # the two PROF_* jobs alone (the folder also holds other runs' legacy files)
        d.mkdir()
        for job in sorted(p for p in fixture_path(*parts).iterdir() if p.name.startswith("PROF_")):
            shutil.copytree(job, d / job.name)
    else:
        shutil.copytree(fixture_path(*parts), d)
    return d


def _part_ms(doc, key):
    """ms per step: per rank the median over its steps, the largest rank (None when no rank reports it)."""
    per = []
    for r in doc["ranks"]:
        v = [s[key] for s in r["steps"] if s.get(key) is not None and s.get("consistent", True) is not False]
        if v:
            per.append(statistics.median(v) / 1000.0)
    return max(per) if per else None


def _budget(doc):
    exposed, idle = _part_ms(doc, "communication_not_overlapped_us"), _part_ms(doc, "free_us")
    imb = 0.0
    comp = [s["computing_ms"] for s in doc.get("stages") or [] if s.get("computing_ms")]
    if len(comp) >= 2:
        imb += max(comp) - min(comp)
    spreads = [r["spread_ms"] for r in doc.get("rank_imbalance") or [] if r["dimension"] == "computing"]
    imb += max(spreads, default=0.0)
    return {"exposed": exposed, "idle": idle, "imbalance": imb}


@pytest.mark.parametrize("name", sorted(CASES))
def test_root_gains_within_the_steps_waiting_and_idle_time(tmp_path, name):
    doc = analyze_json(_copy(tmp_path, name, CASES[name]))
    assert len(doc["ranks"]) > 1
    adv = doc["advice"]
    ids = [a["id"] for a in adv]
    assert len(set(ids)) == len(ids)
    roots = [a for a in adv if a["symptom_of"] is None]
    assert all(a["symptom_of"] in {r["id"] for r in roots} for a in adv if a["symptom_of"] is not None)
    gains = [a["gain_ms"] for a in roots if a["gain_ms"] is not None]
    assert gains == sorted(gains, reverse=True)
    budget = _budget(doc)
    total = sum(v for v in budget.values() if v is not None)
    assert sum(gains) <= total + 1e-6, (name, gains, budget)
    step = doc["summary"]["step_time_s"]
    if step is not None:
        assert sum(gains) <= step * 1000.0 + 1e-6
    for pool, cap in budget.items():  # no two roots explain the same stretch of time
        drawn = sum(a["gain_ms"] for a in roots if a["explains"] == pool and a["gain_ms"] is not None)
        assert cap is None or drawn <= cap + 1e-6, (name, pool, drawn, cap)


def test_pipeline_fixture_stage_imbalance_is_the_top_root(tmp_path):
    doc = analyze_json(fixture_path(*G))
    adv = doc["advice"]
    top = adv[0]
    assert top["rule"] == "stage_imbalance" and top["symptom_of"] is None and top["stage"] == 1
    # stages table: stage 1 computes 122.948 ms, stage 0 14.580 ms per step (test_stages / the profiler's files):
    # the gain is stage 1 above their mean
    comp = {s["stage"]: s["computing_ms"] for s in doc["stages"]}
    assert top["gain_ms"] == pytest.approx(comp[1] - (comp[0] + comp[1]) / 2)
    folded = [a for a in adv if a["rule"] in ("rank_imbalance", "wait_ratio", "pipeline_bubble")]
    assert folded and all(a["symptom_of"] == top["id"] for a in folded)
    assert not [a for a in adv if a["symptom_of"] is None and a["rule"] in ("rank_imbalance", "wait_ratio")]


def test_advise_show_compare_read_one_ranked_list(tmp_path):
    """`perfbench advise` on a stored import of set G: the same rows, in the same order, as the stored table;
    the verdict is the first root; show leads with it; an unknown run id exits 2 naming it."""
    import json

    from perfbench.store import Store
    from tests.support import perfbench_in_process, run_perfbench

    res = tmp_path / "results"
    perfbench_in_process("analyze", fixture_path(*G), "--results", res)
    rid = Store(res, create=False).list_runs()[0]["run_id"]
    doc = json.loads(perfbench_in_process("advise", rid, "--results", res, "--json").stdout)
    stored = Store(res, create=False).read_table(rid, "advice")
    assert [a["id"] for a in doc["advice"]] == list(stored["id"])
    assert doc["verdict"] == "stage_imbalance:1" == doc["advice"][0]["id"]
    assert doc["advice"][0]["ranks"] == [2, 3]
    text = perfbench_in_process("advise", rid, "--results", res).stdout
    assert "1. [high] saves ~54.2 ms/step" in text and "2. [low] saves" in text
    assert text.index("symptom (rank_imbalance") < text.index("2. [low]")  # folded under the cause, not a headline
    show = perfbench_in_process("show", rid, "--results", res).stdout
    assert show.index("Pipeline stage 1 is the bottleneck") < show.index("Key numbers")
    r = run_perfbench("advise", "no-such-run", "--results", res, check=False, timeout=120)
    assert r.returncode == 2 and "no-such-run" in r.stderr and "Traceback" not in r.stderr
