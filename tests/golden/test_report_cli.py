"""`perfbench report RUN|SWEEP -o FILE` on a store imported from a real Ascend fixture (and a small sweep written
through the Store API): one self-contained HTML file whose numbers are the store's."""

from __future__ import annotations

import re
import shutil

import pytest

from perfbench.cli import main
from perfbench.store import Store
from perfbench.views.html_report import PLOTLY_SCRIPT_ID
from tests.support import fixture_path

B1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    res = tmp_path_factory.mktemp("report") / "res"
    assert main(["analyze", str(fixture_path(*B1)), "--results", str(res)]) == 0
    store = Store(res, create=False)
    (rec,) = store.list_runs()
    return res, rec["run_id"]


def page_without_plotly(text: str) -> str:
    """The page with the inlined plotly.js library taken out (its source names URLs in strings it never loads)."""
    lib = re.compile(rf'<script type="text/javascript" id="{PLOTLY_SCRIPT_ID}">.*?</script>', re.S)
    assert len(lib.findall(text)) == 1, "plotly.js must be inlined exactly once"
    return lib.sub("", text)


def visible(text: str) -> str:
    """The page's text as a reader sees it: scripts and tags out, entities decoded."""
    import html

    text = re.sub(r"<(script|style).*?</\1>", " ", text, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def report(tmp_path, res, target: str) -> str:
    out = tmp_path / "report.html"
    assert main(["report", target, "--results", str(res), "-o", str(out)]) == 0
    assert out.is_file()
    return out.read_text(encoding="utf-8")


def test_run_report_is_self_contained_and_holds_the_stored_numbers(imported, tmp_path):
    res, rid = imported
    text = report(tmp_path, res, rid)
    rest = page_without_plotly(text)
    for pat in ('src="http', "src='http", 'href="http', "href='http", "<link", "@import", "cdn."):
        assert pat not in rest, pat
    assert "Plotly.newPlot" in rest
    shown = visible(text)
    store = Store(res, create=False)
    # the verdict: the first advice row's message, as stored
    advice = store.read_table(rid, "advice")
    assert str(advice["message"].iloc[0]) in shown
    for msg in advice["message"]:
        assert str(msg) in shown
    # each rank's breakdown, in ms with 3 decimals, from the stored table
    bd = store.read_table(rid, "rank_breakdown").sort_values("rank")
    assert len(bd) == 2
    for r in bd.to_dict("records"):
        cells = [
            f"{r[c] / 1000:.3f}" for c in ("step_us", "computing_us", "communication_not_overlapped_us", "free_us")
        ]
        assert re.search(rf"\b{int(r['rank'])}\s+" + r"\s+".join(map(re.escape, cells)), shown), cells
        # the parts add up to the rank's step (the profiler's own step trace does)
        parts = r["computing_us"] + r["communication_not_overlapped_us"] + r["free_us"]
        assert parts == pytest.approx(r["step_us"], rel=0.01)
    # the communication matrix from the stored link totals: rank 0 -> 1 over HCCS, 61.210624 MB in 3.883938 ms
    lt = store.read_table(rid, "link_totals")
    hop = lt[(lt["src"] == 0) & (lt["dst"] == 1)].iloc[0]
    gbps = hop["size_mb"] / hop["time_ms"]
    assert gbps == pytest.approx(15.76, abs=0.01)
    assert re.search(rf"\b0\s+1\s+HCCS\s+{hop['size_mb']:.3f}\s+{hop['time_ms']:.3f}\s+{gbps:.2f}\b", shown)
    # top kernels: every stored one, by its short name
    for name in store.read_table(rid, "top_kernels")["name"]:
        assert str(name).rsplit("/", 1)[-1] in shown
    assert "no data" not in shown


def test_a_missing_part_is_said_not_drawn(imported, tmp_path):
    res, rid = imported
    copy = tmp_path / "res"
    shutil.copytree(res, copy)
    store = Store(copy, create=False)
    tables = store.run_dir(rid) / "tables"
    removed = [p for p in tables.iterdir() if p.name.split(".")[0] in ("links", "link_totals", "memory")]
    assert len(removed) >= 3
    for p in removed:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    shown = visible(report(tmp_path, copy, rid))
    assert "communication matrix (the run's profiles have no per-link table): no data" in shown
    assert "memory per rank: no data" in shown


def test_a_damaged_rank_is_named_in_the_report(tmp_path):
    """rank 0's step_trace_time.csv cut to its header (in a copy): the report names it, and its breakdown, now
    recomputed from the kernels, still adds up to its step."""
    copy = tmp_path / "level1"
    shutil.copytree(fixture_path(*B1), copy)
    st = copy / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    st.write_text(st.read_text().splitlines()[0] + "\n")
    res = tmp_path / "res"
    assert main(["analyze", str(copy), "--results", str(res)]) == 0
    shown = visible(report(tmp_path, res, "analyze-level1"))
    assert "Missing or damaged input: rank 0: step_trace_time.csv empty" in shown
    store = Store(res, create=False)
    bd = store.read_table(store.list_runs()[0]["run_id"], "rank_breakdown").set_index("rank")
    r0 = bd.loc[0]
    assert r0["source"] == "recomputed"
    cells = [f"{r0[c] / 1000:.3f}" for c in ("step_us", "computing_us", "communication_not_overlapped_us", "free_us")]
    assert re.search(r"\b0\s+" + r"\s+".join(map(re.escape, cells)) + r"\s+recomputed from the kernels", shown)
    parts = r0["computing_us"] + r0["communication_not_overlapped_us"] + r0["free_us"]
    assert parts == pytest.approx(r0["step_us"], rel=0.01)


def _sweep(root, tables_of: tuple | None = None):
    """Six runs of one sweep over world size x comm_fusion (records, as a sweep's ingest writes them); with
    `tables_of` (results, run id), its fastest run gets that run's analysis tables."""
    store = Store(root)
    for i, (ws, fusion) in enumerate([(1, 0), (2, 0), (4, 0), (1, 32), (2, 32), (4, 32)]):
        store.write_run(
            {
                "run_id": f"swp-ws{ws}-f{fusion}-r0",
                "sweep_id": "swp",
                "source": "sweep",
                "status": "ok" if i != 5 else "failed",
                "error": None if i != 5 else "rank 3 exited with code 1",
                "settings": {"workload": "resnet50", "world_size": ws, "parallel.comm_fusion": fusion, "repeat": 0},
                "config": {},
                "metrics": {} if i == 5 else {"throughput": 100.0 * ws - i, "step_time_s": 0.1 + i / 100},
            }
        )
    if tables_of:
        src = Store(tables_of[0], create=False)
        rid = src.get_run(tables_of[1])["run_id"]
        names = src.table_names(rid)
        assert names
        for name in names:
            store.write_table("swp-ws4-f0-r0", name, src.read_table(rid, name))


def test_sweep_report_has_the_runs_the_scaling_and_a_chart_per_setting(tmp_path):
    res = tmp_path / "res"
    _sweep(res)
    text = report(tmp_path, res, "swp")
    shown = visible(text)
    for rid in ("ws1-f0-r0", "ws2-f0-r0", "ws4-f0-r0", "ws1-f32-r0", "ws2-f32-r0", "ws4-f32-r0"):
        assert rid in shown
    assert "failed" in shown
    # the fastest finished run (ws4-f32 failed): ws4-f0 at 400 - 2 = 398 samples/s, shown in full
    assert "Run ws4-f0-r0 (the fastest finished run)" in shown
    best = re.search(r"Runs \(6\).*?\bws4-f0-r0\s+ok\s+resnet50\s+4\s+0\s+(\S+)\s+(\S+)", shown, re.S)
    assert best and best.groups() == ("398", "120.0")  # samples/s and step ms as `ls` prints them
    assert "samples/s by parallel.comm_fusion" in shown
    assert "Scaling" in shown
    # charts: scaling and comm_fusion (the run section's parts have no tables: said, not drawn)
    assert text.count("Plotly.newPlot") == 2
    for part in ("per-rank step breakdown", "multi-rank timeline", "memory per rank", "top kernels", "advice"):
        assert f"{part}: no data" in shown
    assert len(page_without_plotly(text)) < 200_000 and len(text.encode()) < 5 * 2**20


def test_sweep_report_with_a_profiled_run_stays_under_5_mb(imported, tmp_path):
    res = tmp_path / "res"
    _sweep(res, tables_of=imported)
    text = report(tmp_path, res, "swp")
    assert len(text.encode()) < 5_000_000
    shown = visible(text)
    assert "Run ws4-f0-r0 (the fastest finished run)" in shown
    assert "no data" not in shown.split("Run ws4-f0-r0")[1]
    assert text.count("Plotly.newPlot") == 2 + 4  # scaling, comm_fusion; breakdown, matrix, timeline, memory


def test_unknown_target_is_one_line(tmp_path, capsys):
    res = tmp_path / "res"
    _sweep(res)
    assert main(["report", "nope", "--results", str(res), "-o", str(tmp_path / "x.html")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfbench: error:") and "nope" in err and "\n" not in err
    assert not (tmp_path / "x.html").exists()


def test_a_large_cluster_draws_32_ranks_of_the_timeline_and_no_link_table():
    import pandas as pd

    from perfbench.views.html_report import Charts, comm_matrix_html, timeline_html

    tl = pd.DataFrame(
        [
            {"rank": r, "step": 3, "kind": k, "start_ts": 1.0 + i * 0.01, "end_ts": 1.005 + i * 0.01, "ops": 2}
            for r in range(40)
            for i, k in enumerate(("compute", "communication"))
        ]
    )
    charts = Charts()
    out = timeline_html(tl, charts)
    assert "the first 32 of 40 ranks" in out and charts.count == 1
    links = pd.DataFrame(
        [{"src": s, "dst": (s + 1) % 20, "size_mb": 10.0, "time_ms": 2.0, "transport": "RDMA"} for s in range(20)]
    )
    out = comm_matrix_html({"link_totals": links}, charts)
    assert charts.count == 2 and "link type" not in out
    assert timeline_html(None, charts) == '<p class="nodata">multi-rank timeline: no data</p>'
