"""The dashboard's Compare page takes the run ids the CLI takes: `/compare?a=ws1-r0&b=ws2-r0` (short ids,
as `perfbench ls` shows them) fills both pickers with the full run ids, and each table says which statistic it
shows (the catalogue's median over each metric's steps, as the CLI). Fast: real Ascend profiles imported with
`analyze`."""

from __future__ import annotations

import json

import pytest

from tests.support import fixture_path, perfbench_in_process

TEXT = ("Ascend__msinsight", "test", "data", "pytorch", "text")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    results = tmp_path_factory.mktemp("compare_page") / "results"
    for rid, level in (("s1-ws1-r0", "level1"), ("s1-ws2-r0", "level2")):
        perfbench_in_process("analyze", fixture_path(*TEXT, level), "--results", results, "--run-id", rid)
        path = results / "runs" / rid / "run.json"
        rec = json.loads(path.read_text())
        path.write_text(json.dumps({**rec, "sweep_id": "s1"}))  # as a sweep's run: short id `ws1-r0`
    return results


def _values(component, out):
    if isinstance(component, (list, tuple)):
        for c in component:
            _values(c, out)
        return out
    cid = getattr(component, "id", None)
    if cid in ("compare-a", "compare-b"):
        out[cid] = component.value
    if hasattr(component, "children"):
        _values(component.children, out)
    return out


def _text(component) -> str:
    if isinstance(component, str):
        return component
    if isinstance(component, (list, tuple)):
        return " ".join(_text(c) for c in component)
    return _text(getattr(component, "children", None) or "")


def test_short_ids_fill_both_pickers(store):
    from dashboards import data
    from dashboards.pages import compare

    data.configure(store)
    page = compare.layout(a="ws1-r0", b="ws2-r0")
    assert _values(page, {}) == {"compare-a": "s1-ws1-r0", "compare-b": "s1-ws2-r0"}
    text = _text(page)
    assert "no run" not in text and "pick two runs" not in text
    # each table names its statistic
    assert "median over each metric's steps" in text and compare.PER_STEP_NOTE in text
    assert "catalogue aggregation" in text and compare.RUN_METRICS_NOTE in text
    # an id that matches nothing stays as given and the page says so
    page = compare.layout(a="ws9-r0", b="ws2-r0")
    assert _values(page, {})["compare-a"] == "ws9-r0"
    assert "no run 'ws9-r0'" in _text(page)


def test_changes_follow_the_catalogue(store):
    """A share changes in points, a ratio in %, as in the CLI: kernel utilization of the two imports by hand."""
    from perfbench.regress.compare import compare_runs
    from perfbench.store import Store
    from perfbench.views.compare import change, change_text

    cmp = compare_runs(Store(store, create=False), "ws1-r0", "ws2-r0")
    by = {m["metric"]: m for m in cmp.metrics}
    ku = by["kernel_utilization"]
    assert change_text("kernel_utilization", ku) == f"{(ku['b'] - ku['a']) * 100:+.1f}pt"
    st = by["step_time_s"]
    assert change_text("step_time_s", st) == f"{(st['b'] / st['a'] - 1) * 100:+.1f}%"
    assert change("warmup_drift_p", 0.01, 0.5) == "-"
