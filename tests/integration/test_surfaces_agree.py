"""One run, one story, read from every surface a user sees it on: `show --json`, `ls --json`, `compare --json`,
`advise --json`, the dashboard's data layer (dashboards.data.DashData) and the numbers `perfbench report` embeds
in its HTML file (its `perfbench-data` script). On the stored runs of a real msrun sweep, on an imported Ascend
profile (set B, level1) and on a copy of it with one rank's step_trace_time.csv cut to its header:

* the breakdown's parts add up to the step they are shares of, within 1% (the run's, and each rank's);
* each catalogue metric has one value on every surface, with the catalogue's unit and name;
* the root advice gains never sum to more than the time their rules explain (exposed communication, idle time,
  the step), per the ranks' own breakdown;
* a damaged rank is named on every surface, and `analyze --strict` fails on it.

The expected values are the stored records' and tables' own (`show --json`): every other surface must repeat them.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil

import pytest

from analyzers.catalogue import ADDING_PARTS, BREAKDOWN_TOTAL, METRICS
from tests.support import fixture_path, run_perfbench

pytestmark = pytest.mark.timeout(1800)

LEVEL1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")
PART_US = tuple(f"{p.removesuffix('_s')}_us" for p in ADDING_PARTS)
PART_MS = tuple(f"{p.removesuffix('_s')}_ms" for p in ADDING_PARTS)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _json(*args) -> dict | list:
    return json.loads(run_perfbench(*args).stdout)


def surfaces(res, run: str, other: str, tmp_path) -> dict:
    """Every surface's view of `run` (and `compare other run`, B = run)."""
    from dashboards.data import DashData

    show = _json("show", run, "--results", res, "--json")
    rid = show["run_id"]
    ls = next(r for r in _json("ls", "--results", res, "--json") if r["run_id"] == rid)
    cmp = _json("compare", other, rid, "--results", res, "--json")
    adv = _json("advise", rid, "--results", res, "--json")
    dd = DashData(res)
    frame = dd.runs_frame()
    dash_row = frame[frame["run_id"] == rid].iloc[0].to_dict()
    out = tmp_path / f"report-{rid}.html"
    run_perfbench("report", rid, "--results", res, "-o", out)
    page = out.read_text(encoding="utf-8")
    island = re.search(
        rf'<script type="application/json" class="perfbench-data" data-run="{re.escape(rid)}">(.*?)</script>',
        page,
        re.S,
    )
    assert island, "the report embeds its numbers"
    return {
        "rid": rid,
        "show": show,
        "ls": ls,
        "compare": cmp,
        "advise": adv,
        "dash_record": dd.run(rid),
        "dash_row": dash_row,
        "dash_breakdown": dd.breakdown_per_rank(rid),
        "report": json.loads(island.group(1)),
        "report_text": html.unescape(
            re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style).*?</\1>", " ", page, flags=re.S))
        ),
    }


def check_parts_add_up(s: dict) -> None:
    m = s["show"]["metrics"]
    if all(_num(m.get(p)) for p in ADDING_PARTS):
        total = sum(m[p] for p in ADDING_PARTS)
        for where, metrics in (
            ("show", m),
            ("ls", s["ls"]),
            ("dashboard", {k[8:]: v for k, v in s["dash_row"].items() if k.startswith("metrics.")}),
            ("report", {k: v["value"] for k, v in s["report"]["metrics"].items()}),
        ):
            assert metrics[BREAKDOWN_TOTAL] == pytest.approx(total, rel=0.01), where
    rows = s["show"]["tables"]["rank_breakdown"]
    assert rows, "a profiled run has a per-rank breakdown"
    for r in rows:
        if all(_num(r.get(c)) for c in PART_US):
            assert sum(r[c] for c in PART_US) == pytest.approx(r["step_us"], rel=0.01), ("show rank", r["rank"])
    for r in s["report"]["rank_breakdown"]:
        if all(_num(r.get(c)) for c in PART_US):
            assert sum(r[c] for c in PART_US) == pytest.approx(r["step_us"], rel=0.01), ("report rank", r["rank"])
    for r in s["dash_breakdown"].to_dict("records"):
        if all(_num(r.get(c)) for c in PART_MS):
            assert sum(r[c] for c in PART_MS) == pytest.approx(r["step_ms"], rel=0.01), ("dashboard rank", r["rank"])
    by_rank = {r["rank"]: r["step_us"] for r in rows}
    assert {r["rank"]: r["step_us"] for r in s["report"]["rank_breakdown"]} == pytest.approx(by_rank)
    dash = {int(r["rank"]): 1000 * r["step_ms"] for r in s["dash_breakdown"].to_dict("records")}
    assert dash == pytest.approx(by_rank)


def check_one_value_unit_name(s: dict) -> None:
    m = s["show"]["metrics"]
    dash = {k[8:]: v for k, v in s["dash_row"].items() if k.startswith("metrics.")}
    checked = 0
    for name, v in m.items():
        if name not in METRICS or not _num(v):
            continue
        checked += 1
        assert s["ls"][name] == pytest.approx(v, rel=1e-9), ("ls", name)
        assert dash[name] == pytest.approx(v, rel=1e-9), ("dashboard", name)
        rep = s["report"]["metrics"][name]
        assert rep["value"] == pytest.approx(v, rel=1e-9), ("report", name)
        assert (rep["unit"], rep["label"]) == (METRICS[name].unit, METRICS[name].label), ("report", name)
    assert checked >= 5
    # compare: B is this run; its value of each metric is the record's, in the catalogue's unit
    for row in s["compare"]["metrics"]:
        name = row["metric"]
        if name not in METRICS:
            continue
        assert row["unit"] == METRICS[name].unit, ("compare unit", name)
        if _num(m.get(name)) and _num(row.get("b")):
            assert row["b"] == pytest.approx(m[name], rel=1e-6), ("compare b", name)  # the median, as the record


def check_gains(s: dict) -> None:
    advice = s["advise"]["advice"]
    assert [a["id"] for a in advice] == [a["id"] for a in s["report"]["advice"]]
    for a, b in zip(advice, s["report"]["advice"]):
        assert a["gain_ms"] == b["gain_ms"] or (a["gain_ms"] is None and b["gain_ms"] is None), a["id"]
    roots = [a for a in advice if a.get("symptom_of") is None and _num(a.get("gain_ms"))]
    ranks = [r for r in s["show"]["tables"]["rank_breakdown"] if all(_num(r.get(c)) for c in PART_US)]
    if not ranks:
        assert not roots
        return
    pool_ms = {
        "exposed": max(r["communication_not_overlapped_us"] for r in ranks) / 1000,
        "idle": max(r["free_us"] for r in ranks) / 1000,
    }
    step_ms = max(r["step_us"] for r in ranks) / 1000
    for kind, pool in pool_ms.items():
        claimed = sum(a["gain_ms"] for a in roots if a.get("explains") == kind)
        assert claimed <= pool * 1.01 + 1e-6, (kind, claimed, pool)
    assert sum(a["gain_ms"] for a in roots) <= step_ms * 1.01, "the gains claim more than the step"
    compute_ms = min(r["computing_us"] for r in ranks) / 1000
    assert sum(a["gain_ms"] for a in roots) <= step_ms - compute_ms + 0.01 * step_ms, "a fix removed compute"


def check_story(s: dict) -> None:
    check_parts_add_up(s)
    check_one_value_unit_name(s)
    check_gains(s)


def test_an_imported_ascend_profile_tells_one_story(imported_store, tmp_path):
    res = tmp_path / "res"
    shutil.copytree(imported_store, res)
    run_perfbench("analyze", fixture_path(*LEVEL1[:-1], "level2"), "--results", res, "--run-id", "imp-level2")
    s = surfaces(res, "analyze-level1", "imp-level2", tmp_path)
    check_story(s)
    for where in ("show", "ls", "advise"):
        assert s[where]["input_problems"] == [] if where != "show" else not s[where].get("input_problems")


def test_a_damaged_rank_is_named_on_every_surface_and_fails_strict(tmp_path):
    copy = tmp_path / "level1"
    shutil.copytree(fixture_path(*LEVEL1), copy)
    st = copy / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_text(st.read_text().splitlines()[0] + "\n")
    res = tmp_path / "res"
    run_perfbench("analyze", fixture_path(*LEVEL1), "--results", res, "--run-id", "intact")
    run_perfbench("analyze", copy, "--results", res, "--run-id", "damaged")
    s = surfaces(res, "damaged", "intact", tmp_path)
    check_story(s)

    def named(problems) -> bool:
        return any(p.get("rank") == 0 and p.get("file") == "step_trace_time.csv" for p in problems or [])

    assert named(s["show"]["input_problems"])
    assert named(s["ls"]["input_problems"])
    assert named(s["compare"]["b"]["input_problems"]) and not s["compare"]["a"]["input_problems"]
    assert named(s["advise"]["input_problems"])
    assert named(s["dash_record"]["input_problems"])
    assert named(s["report"]["input_problems"])
    assert "Missing or damaged input: rank 0: step_trace_time.csv empty" in s["report_text"]
    for cmd in (["show", "damaged"], ["advise", "damaged"], ["compare", "intact", "damaged"], ["ls"]):
        out = run_perfbench(*cmd, "--results", res).stdout
        assert re.search(r"rank 0\b", out) and ("step_trace_time.csv" in out or cmd == ["ls"]), cmd
    strict = run_perfbench("analyze", copy, "--no-store", "--strict", check=False)
    assert strict.returncode != 0 and "step_trace_time.csv" in strict.stderr and "Traceback" not in strict.stderr


@pytest.mark.msrun
def test_the_stored_runs_of_a_real_sweep_tell_one_story(sweep_store, tmp_path):
    from perfbench.store import Store

    runs = [r for r in Store(sweep_store, create=False).list_runs() if r["status"] == "ok"]
    one = next(r for r in runs if r["settings"]["world_size"] == 1)
    for rec in runs:
        if rec["settings"]["world_size"] == 2:
            check_story(surfaces(sweep_store, rec["run_id"], one["run_id"], tmp_path))
