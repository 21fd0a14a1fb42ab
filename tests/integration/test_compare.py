"""`perfbench compare` on the session's real tiny sweep (ResNet-50 on 1 and 2 ranks through msrun)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from perfbench.store import Store
from tests.support import run_perfbench

pytestmark = [pytest.mark.msrun, pytest.mark.timeout(1800)]  # every test reads the session's real sweep


def _ok_runs(results):
    return [r for r in Store(results, create=False).list_runs() if r["status"] == "ok"]


def _pick(results, ws, repeat=None):
    for r in _ok_runs(results):
        if r["settings"]["world_size"] == ws and (repeat is None or r["settings"]["repeat"] == repeat):
            return r
    pytest.fail(f"the session sweep has no finished run with world_size={ws} repeat={repeat}")


def _expected_step_samples(results, rec):
    """Per-step values straight from the stored table (the documented formulas), independent of
    perfbench.regress.compare."""
    ws = Store(results, create=False).read_table(rec["run_id"], "workload_steps")
    ws = ws[ws["step"] >= rec["config"]["train"]["warmup_steps"]]
    # docs/concepts.md: measured steps are the post-warm-up steps outside the profiled window
    ws = ws[~ws["profiled"].astype(bool)]
    t = ws.groupby("step")["step_time_s"].max()
    n = ws.groupby("step")["samples"].sum()
    return t.to_numpy(), (n / t).to_numpy()


def test_compare_one_vs_two_ranks_markdown_and_json(sweep_store):
    a, b = _pick(sweep_store, 1, 0), _pick(sweep_store, 2)
    term = run_perfbench("compare", a["run_id"], b["run_id"], "--results", sweep_store).stdout
    assert term.splitlines()[1].startswith("Verdict: B is")  # the terminal report leads with the verdict
    md = run_perfbench("compare", a["run_id"], b["run_id"], "--results", sweep_store, "--markdown").stdout
    for heading in ("Per-step metrics", "Settings that differ", "Run metrics"):
        assert heading in md
    assert re.search(r"\| settings\.world_size \| 1 \| 2 \|", md)
    doc = json.loads(run_perfbench("compare", a["run_id"], b["run_id"], "--results", sweep_store, "--json").stdout)
    assert doc["a"]["run_id"] == a["run_id"] and doc["b"]["run_id"] == b["run_id"]
    by = {m["metric"]: m for m in doc["metrics"]}
    ta, xa = _expected_step_samples(sweep_store, a)
    tb, xb = _expected_step_samples(sweep_store, b)
    # medians over the measured steps, the catalogue's basis (`perfbench metrics`), in every view
    assert by["step_time_s"]["a"] == pytest.approx(np.median(ta)) and by["step_time_s"]["b"] == pytest.approx(
        np.median(tb)
    )
    assert by["throughput"]["a"] == pytest.approx(np.median(xa)) and by["throughput"]["b"] == pytest.approx(
        np.median(xb)
    )
    assert by["throughput"]["rel"] == pytest.approx(np.median(xb) / np.median(xa) - 1)
    assert by["step_time_s"]["n_a"] == len(ta) and by["step_time_s"]["n_b"] == len(tb)
    lo, hi = by["throughput"]["ci_low"], by["throughput"]["ci_high"]
    assert lo <= by["throughput"]["rel"] <= hi  # the interval is around the point estimate
    keys = {d["key"] for d in doc["settings_diff"]}
    assert {"settings.world_size", "config.world_size"} <= keys
    assert ("settings.repeat" in keys) == (a["settings"]["repeat"] != b["settings"]["repeat"])
    # the 2-rank run all-reduces its gradients every step (profiled): they show up with their sizes
    assert doc["collectives"], "no collectives in the compare report of a 2-rank run"
    ar = [c for c in doc["collectives"] if c["count_b"]]
    assert ar and all((c["bytes_b"] or 0) > 0 for c in ar)
    assert not any(c["count_a"] for c in doc["collectives"])  # the 1-rank run has none


def test_compare_run_with_itself_has_no_change(sweep_store):
    a = _pick(sweep_store, 1, 0)
    doc = json.loads(run_perfbench("compare", a["run_id"], a["run_id"], "--results", sweep_store, "--json").stdout)
    assert doc["settings_diff"] == []
    for m in doc["metrics"]:
        assert m["rel"] == pytest.approx(0.0, abs=1e-12) or m["a"] == 0
    for r in doc["breakdown"]:
        assert r["delta_ms"] == pytest.approx(0.0, abs=1e-9)


def test_compare_html_is_self_contained(sweep_store, tmp_path):
    a, b = _pick(sweep_store, 1, 0), _pick(sweep_store, 1, 1)
    out = tmp_path / "report" / "cmp.html"
    run_perfbench("compare", a["run_id"], b["run_id"], "--results", sweep_store, "--html", out)
    html = out.read_text()
    assert html.startswith("<!doctype html>") and a["run_id"] in html and b["run_id"] in html
    assert "Plotly.newPlot" in html and len(html) > 1_000_000  # plotly.js is inlined
    assert not re.search(r"<script[^>]+src=", html)  # nothing loaded from elsewhere
    assert html.count("Plotly.newPlot") >= 2  # step-time and throughput distributions at least


def test_compare_bad_input_exits_2(sweep_store, tmp_path):
    a = _pick(sweep_store, 1, 0)
    r = run_perfbench("compare", a["run_id"], "no-such-run", "--results", sweep_store, check=False)
    assert r.returncode == 2 and "no run 'no-such-run'" in r.stderr and "Traceback" not in r.stderr
    r = run_perfbench("compare", a["run_id"], a["run_id"], "--results", tmp_path / "missing", check=False)
    assert r.returncode == 2 and "no results at" in r.stderr
    r = run_perfbench(
        "compare", a["run_id"], a["run_id"], "--results", sweep_store, "--html", "/proc/nope/x.html", check=False
    )
    assert r.returncode == 2 and "cannot write" in r.stderr


def test_compare_failed_run_is_refused(sweep_store, tmp_path):
    import shutil

    res = tmp_path / "results"
    shutil.copytree(sweep_store, res, ignore=shutil.ignore_patterns("artifacts"))
    store = Store(res, create=False)
    a = _pick(res, 1, 0)
    rec = dict(_pick(res, 1, 1), status="failed", error="rank 0 failed (msrun exit code 1)")
    store.write_run(rec)
    r = run_perfbench("compare", a["run_id"], rec["run_id"], "--results", res, check=False)
    assert r.returncode == 2 and "status 'failed'" in r.stderr and "rank 0 failed" in r.stderr


def test_step_samples_match_the_tables_for_every_run(sweep_store):
    from perfbench.regress.compare import step_samples

    store = Store(sweep_store, create=False)
    for rec in _ok_runs(sweep_store):
        s = step_samples(store, rec)
        t, x = _expected_step_samples(sweep_store, rec)
        np.testing.assert_allclose(s["step_time_s"], t)
        np.testing.assert_allclose(s["throughput"], x)


def test_breakdown_parts_add_up_to_the_profiled_step_on_a_stored_run(sweep_store):
    """By hand from the stored step_breakdown (profiled steps after warm-up): per step the mean over ranks of each
    part, the median over steps; compute + exposed comm + free = the profiled step `show` divides by, within 1%, and
    `show`'s shares of it add to 100%. The unprofiled step time stands beside it with the profiler's cost."""
    import numpy as np

    rec = _pick(sweep_store, 2)
    store = Store(sweep_store, create=False)
    sb = store.read_table(rec["run_id"], "step_breakdown")
    sb = sb[(sb["step"] >= rec["config"]["train"]["warmup_steps"]) & (sb["step_us"] > 0)]
    per_step = sb.groupby("step")[["computing_us", "communication_not_overlapped_us", "free_us"]].mean()
    hand_ms = float(np.median(per_step, axis=0).sum()) / 1000
    shown = json.loads(run_perfbench("show", rec["run_id"], "--results", sweep_store, "--json").stdout)["metrics"]
    assert 1000 * shown["breakdown_step_s"] == pytest.approx(hand_ms, rel=0.01)
    # per rank and step the parts add up to the step window exactly (the profiler's windows, not our sum)
    parts = sb["computing_us"] + sb["communication_not_overlapped_us"] + sb["free_us"]
    assert np.allclose(parts, sb["step_us"], rtol=0.01)
    out = run_perfbench("show", rec["run_id"], "--results", sweep_store).stdout
    shares = [
        float(line.split("(")[1].split("%")[0])
        for line in out.splitlines()
        if "of profiled step" in line and line.strip().startswith(("compute ms ", "exposed comm ms ", "free ms "))
    ]
    assert len(shares) == 3 and sum(shares) == pytest.approx(100, abs=1.0)
    flat = " ".join(out.split())  # (the line wraps at the terminal's width)
    assert "profiler cost" in flat and "the breakdown splits the profiled step" in flat
