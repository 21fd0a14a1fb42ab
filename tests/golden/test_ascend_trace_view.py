"""Streaming Chrome-trace reader on real trace_view.json files (sets B and E)."""

from __future__ import annotations

import json

import pytest

from analyzers.parsers.trace_view import iter_events, x_events
from perfbench.errors import ProfileFormatError
from tests.support import fixture_path

TV = fixture_path(
    "Ascend__msinsight",
    "test",
    "data",
    "pytorch",
    "text",
    "level1",
    "rank0_ascend_pt",
    "ASCEND_PROFILER_OUTPUT",
    "trace_view.json",
)
TV_E = fixture_path("Ascend__msprof-analyze", "test", "ut", "advisor", "timeline_advice", "trace_view.json")


@pytest.mark.parametrize("path", [TV, TV_E])
def test_both_engines_agree_with_json_load(path):
    ref = json.loads(path.read_text())
    ref_x = [e for e in ref if e.get("ph") == "X"]
    a = x_events(path, engine="duckdb")
    b = x_events(path, engine="ijson")
    assert len(a.x) == len(b.x) == len(ref_x)
    assert a.x["dur"].sum() == pytest.approx(sum(float(e.get("dur", 0)) for e in ref_x))
    assert a.x["ts"].min() == pytest.approx(min(float(e["ts"]) for e in ref_x))
    names = {str(e["pid"]): e["args"]["name"] for e in ref if e.get("ph") == "M" and e["name"] == "process_name"}
    assert a.process_names == b.process_names == names


def test_iter_events_filters_phases_and_converts_ts():
    evs = list(iter_events(TV, phases={"C"}))
    assert evs and all(e["ph"] == "C" for e in evs)
    assert all(isinstance(e["ts"], float) for e in evs)


def test_args_prefix_only_keeps_matching_args():
    te = x_events(TV, args_prefix="hcom_")
    hc = te.x[te.x["name"].str.startswith("hcom_")]
    assert len(hc) and hc["args"].map(lambda a: isinstance(a, dict) and "count" in a).any()
    assert te.x.loc[~te.x["name"].str.startswith("hcom_"), "args"].isna().all()


@pytest.mark.parametrize("engine", ["duckdb", "ijson"])
def test_truncated_trace_is_a_clear_error(tmp_path, engine):
    bad = tmp_path / "trace_view.json"
    data = TV.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(ProfileFormatError, match="trace_view.json.*(truncated|corrupt)"):
        x_events(bad, engine=engine)


def test_not_json_and_empty(tmp_path):
    f = tmp_path / "trace_view.json"
    f.write_text("")
    with pytest.raises(ProfileFormatError, match="empty"):
        list(iter_events(f))
    f.write_text("hello")
    with pytest.raises(ProfileFormatError, match="not a Chrome-trace"):
        x_events(f)


def test_object_wrapped_trace(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "name": "a", "pid": 1, "tid": 2, "ts": "10.5", "dur": 2},
                    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "P"}},
                ]
            }
        )
    )
    te = x_events(f)
    assert list(te.x["ts"]) == [10.5] and te.process_names == {"1": "P"}


def test_uint64_ids_beyond_int64_fall_back_to_the_python_backend():
    """msprof writes connection ids like 18446744073709551615, which ijson's C backend rejects."""
    import json

    from analyzers.parsers.trace_view import iter_events
    from tests.support import fixture_path

    f = next(
        fixture_path(
            "hicann__oam-tools",
            "experiment",
            "task-book",
            "msprof_experience_weixin_63089733",
            "perf-data",
            "20260624_matmul_basic_api_board",
            "mindstudio_profiler_output",
        ).glob("msprof_*.json")
    )
    expected = json.loads(f.read_text())
    assert any(isinstance(v, int) and v > 2**63 for e in expected for v in (e.get("args") or {}).values())
    got = list(iter_events(f))
    assert len(got) == len(expected)
    assert [e["name"] for e in got] == [e["name"] for e in expected]
