"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright) over the
session's real tiny sweep: every page loads without browser console errors, a run's breakdown chart has
one bar per rank, filtering the grid works, the compare page shows both runs."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest

from perfbench.store import Store
from tests.support import free_port, ROOT

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1800)]

CHROMIUM = os.environ.get("PERFBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port(lo=8070, hi=8099) -> int:
    return free_port(lo, hi)


@contextlib.contextmanager
def serve(results):
    """`perfbench dashboard` on `results` in a subprocess; yields its base URL, stops it afterwards."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the test set-up must `apt-get install -y chromium`")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "dashboard", "--results", str(results), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        end = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/", timeout=3) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.time() > end:
                    out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
                    pytest.fail(f"dashboard did not start on {base}: {out[-2000:]}")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture(scope="module")
def dashboard(sweep_store):
    with serve(sweep_store) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class Page:
    """A fresh page that records console errors, uncaught exceptions and failed requests."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on(
            "console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("response", lambda r: self.errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)

    def open(self, url: str, selector: str):
        self.page.goto(url)
        self.page.wait_for_selector(selector, timeout=60_000)
        self.page.wait_for_load_state("networkidle")
        return self.page


def _ok_runs(results):
    return [r for r in Store(results, create=False).list_runs() if r["status"] == "ok"]


def _grid_cells(page) -> list[dict]:
    """The grid's rows as shown: {column id: cell text}."""
    return page.evaluate("""() => [...document.querySelectorAll('#runs-grid tbody tr')]
        .filter(tr => tr.querySelector('td[data-dash-column="run_id"]'))
        .map(tr => Object.fromEntries([...tr.querySelectorAll('td[data-dash-column]')]
            .map(td => [td.dataset.dashColumn, td.innerText.trim()])))""")


def _grid_rows(page) -> int:
    return page.locator("#runs-grid tbody tr:has(td)").count()


@pytest.mark.msrun
def test_every_page_loads_without_console_errors(dashboard, browser, sweep_store):
    runs = _ok_runs(sweep_store)
    assert runs, "the session sweep has no finished run"
    pages = {
        "/": "#runs-grid td",
        f"/run/{runs[-1]['run_id']}": "#run-breakdown .main-svg",
        "/scaling": "#scaling-throughput .main-svg",
        f"/compare?a={runs[0]['run_id']}&b={runs[-1]['run_id']}": "#compare-metrics td",
        "/run/no-such-run": "#run-page",
    }
    for path, sel in pages.items():
        p = Page(browser)
        page = p.open(dashboard + path, sel)
        page.wait_for_timeout(500)  # late callbacks
        assert p.errors == [], f"{path}: {p.errors}"
        assert "Error" not in (page.title() or "")
        page.close()


@pytest.mark.msrun
def test_scaling_page_draws_the_predicted_curve_with_its_band(dashboard, browser, sweep_store):
    import json

    from tests.support import run_perfbench

    p = Page(browser)
    page = p.open(dashboard + "/scaling", "#scaling-throughput .main-svg")
    page.wait_for_function(
        """() => {
        const g = document.querySelector('#scaling-throughput .js-plotly-plot');
        return g && g.data && g.data.some(t => t.name === 'predicted');
    }""",
        timeout=30_000,
    )
    traces = page.evaluate("""() => document.querySelector('#scaling-throughput .js-plotly-plot').data
        .map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))""")
    pred = next(t for t in traces if t["name"] == "predicted")
    band = next(t for t in traces if t["name"] == "predicted interval")
    assert 16 in pred["x"] and len(band["x"]) == 2 * len(pred["x"])
    sweep = _ok_runs(sweep_store)[0]["sweep_id"]
    assert f"perfbench predict --from {sweep}" in page.inner_text("#scaling-predicted")
    # the page draws what the command predicts
    cli = json.loads(
        run_perfbench("predict", "--results", sweep_store, "--from", sweep, "--set", "world_size=16", "--json").stdout
    )
    assert pred["y"][pred["x"].index(16)] == pytest.approx(cli["throughput"], rel=1e-9)
    assert p.errors == []
    page.close()


@pytest.mark.msrun
def test_run_breakdown_has_one_bar_per_rank(dashboard, browser, sweep_store):
    for rec in _ok_runs(sweep_store):
        ws = rec["settings"]["world_size"]
        p = Page(browser)
        page = p.open(f"{dashboard}/run/{rec['run_id']}", "#run-breakdown .main-svg")
        xs = page.evaluate("""() => {
            const g = document.querySelector('#run-breakdown .js-plotly-plot');
            return g.data.map(t => Array.from(t.x));
        }""")
        assert xs, f"{rec['run_id']}: empty breakdown chart"
        for x in xs:
            assert x == [f"rank {r}" for r in range(ws)], (rec["run_id"], x)
        # the bars are drawn, not only in the data: one bar per rank per part
        drawn = page.locator("#run-breakdown g.point").count()
        assert drawn >= ws and drawn % ws == 0
        timeline_ranks = page.evaluate("""() => {
            const g = document.querySelector('#run-timeline .js-plotly-plot');
            return [...new Set(g.data.flatMap(t => Array.from(t.y)))].length;
        }""")
        assert timeline_ranks == ws
        assert p.errors == []
        page.close()


@pytest.mark.msrun
def test_filtering_the_grid(dashboard, browser, sweep_store):
    runs = Store(sweep_store, create=False).list_runs()
    p = Page(browser)
    page = p.open(dashboard + "/", "#runs-grid td")
    assert _grid_rows(page) == len(runs)
    assert page.locator("#sweeps-count").inner_text().startswith(f"{len(runs)} of {len(runs)}")
    target = max(r["settings"]["world_size"] for r in runs)
    want = sum(1 for r in runs if r["settings"]["world_size"] == target)
    assert 0 < want < len(runs), "the sweep should have runs of more than one world size"
    flt = page.locator('#runs-grid th.dash-filter[data-dash-column="settings.world_size"] input[type=text]')
    flt.fill(str(target))
    flt.press("Enter")
    page.wait_for_function(
        f"() => document.querySelectorAll('#runs-grid tbody tr:has(td)').length === {want}", timeout=30_000
    )
    cells = page.locator('#runs-grid td[data-dash-column="settings.world_size"]').all_inner_texts()
    assert cells and set(c.strip() for c in cells) == {str(target)}
    page.wait_for_function(
        f"() => document.querySelector('#sweeps-count').innerText.startsWith('{want} of')", timeout=30_000
    )
    # the views across settings follow the filter: the heatmap shows only that world size
    page.wait_for_function(
        """(t) => {
        const g = document.querySelector('#sweeps-heatmap .js-plotly-plot');
        return g && g.data && g.data.length && JSON.stringify(Array.from(g.data[0].x)) === JSON.stringify([String(t)]);
    }""",
        arg=target,
        timeout=30_000,
    )
    # run links lead to the run page of that run
    first = page.locator('#runs-grid td[data-dash-column="run_id"]').first.inner_text().strip()
    page.locator('#runs-grid td[data-dash-column="open"] a').first.click()
    page.wait_for_selector("#run-breakdown .main-svg", timeout=60_000)
    assert page.url.endswith(f"/run/{first}")
    assert p.errors == []
    page.close()


@pytest.mark.msrun
def test_compare_page_shows_both_runs(dashboard, browser, sweep_store):
    runs = _ok_runs(sweep_store)
    a = next(r for r in runs if r["settings"]["world_size"] == 1)
    b = next((r for r in runs if r["settings"]["world_size"] == 2), runs[-1])
    p = Page(browser)
    page = p.open(f"{dashboard}/compare?a={a['run_id']}&b={b['run_id']}", "#compare-metrics td")
    assert page.locator("#compare-link-a").inner_text() == a["run_id"]
    assert page.locator("#compare-link-b").inner_text() == b["run_id"]
    header = " ".join(page.locator("#compare-metrics th").all_inner_texts())
    assert f"A {a['run_id']}" in header and f"B {b['run_id']}" in header
    metrics = page.locator('#compare-metrics td[data-dash-column="metric"]').all_inner_texts()
    assert "throughput" in metrics and "step_time_s" in metrics
    assert page.locator("#compare-fig-0 .main-svg").count() >= 1
    if a["settings"]["world_size"] != b["settings"]["world_size"]:
        assert "settings.world_size" in page.locator("#compare-settings").inner_text()
    # picking another B updates the page and the shareable URL
    other = next((r for r in runs if r["run_id"] not in (a["run_id"], b["run_id"])), None)
    if other is not None:
        page.locator("#compare-b").click()
        page.get_by_role("option", name=other["run_id"], exact=True).click()
        page.wait_for_function(
            f"() => document.querySelector('#compare-link-b')?.innerText === '{other['run_id']}'", timeout=30_000
        )
        assert f"b={other['run_id']}" in page.url
    assert p.errors == []
    page.close()


# ---- the story at a glance ---------------------------------------------------------------------


@pytest.mark.msrun
def test_run_page_opens_with_the_verdict_and_key_numbers(dashboard, browser, sweep_store):
    store = Store(sweep_store, create=False)
    rec = next(r for r in _ok_runs(sweep_store) if r["settings"]["world_size"] == 2)
    rid, m = rec["run_id"], rec["metrics"]
    p = Page(browser)
    page = p.open(f"{dashboard}/run/{rid}", "#run-verdict")
    verdict = page.locator("#run-verdict").inner_text()
    advice = store.read_table(rid, "advice")
    if advice is not None and len(advice):
        top = advice.iloc[0]  # stored ranked: the root with the largest expected gain first (analyzers.analyses.advice)
        roots = advice[advice["symptom_of"].isna()]
        assert top["id"] == roots.iloc[0]["id"] and top["gain_ms"] == roots["gain_ms"].max()
        assert top["message"] in verdict and str(top["evidence"]) in verdict and "ms/step" in verdict
    else:
        assert "no finding" in verdict
    # the verdict and the numbers come before any chart in the page
    order = page.evaluate("""() => ['#run-verdict', '#run-key-numbers', '#run-charts'].map(
        s => document.querySelector(s).getBoundingClientRect().top)""")
    assert order == sorted(order)
    # key numbers in their units, formatted by hand from run.json (ms with one decimal, shares as %)
    step = page.locator("#run-metric-step_time_s .metric-value").inner_text()
    assert step == f"{1000 * m['step_time_s']:.1f} ms"
    share = page.locator("#run-metric-comm_share .metric-value").inner_text()
    assert share == f"{100 * m['comm_share']:.1f}%"
    # the definition is the tooltip
    title = page.locator("#run-metric-comm_share").get_attribute("title")
    assert "communication_us / step_us" in title
    # the profiled step the breakdown splits, beside the step time, with the profiler's cost between them
    prof = page.locator("#run-metric-breakdown_step_s .metric-value").inner_text()
    assert prof == f"{1000 * m['breakdown_step_s']:.1f} ms"
    assert "profiler cost" in page.locator("#run-step-story").inner_text()
    text = page.locator("#run-page").inner_text()
    assert '{"repeat"' not in text and f"{m['comm_share']:.4g}" not in text
    assert page.locator("#run-settings").inner_text().count("world size") == 1
    assert p.errors == []
    page.close()


@pytest.mark.msrun
def test_run_page_downloads_the_merged_trace(dashboard, browser, sweep_store):
    import gzip
    import json

    rec = next(r for r in _ok_runs(sweep_store) if r["settings"]["world_size"] == 2)
    p = Page(browser)
    page = p.open(f"{dashboard}/run/{rec['run_id']}", "#run-trace-button")
    with page.expect_download(timeout=120_000) as dl:
        page.locator("#run-trace-button").click()
    path = dl.value.path()
    assert dl.value.suggested_filename == f"{rec['run_id']}.trace.json.gz"
    trace = json.loads(gzip.decompress(open(path, "rb").read()))
    assert trace["otherData"]["run_id"] == rec["run_id"]
    pids = {e["pid"] for e in trace["traceEvents"] if "pid" in e}
    assert pids == {0, 1}  # a process per rank of the 2-rank run
    assert p.errors == []
    page.close()


@pytest.mark.msrun
def test_sweeps_grid_shows_formatted_values_and_two_different_axes(dashboard, browser, sweep_store):
    runs = _ok_runs(sweep_store)
    p = Page(browser)
    page = p.open(dashboard + "/", "#runs-grid td")
    shown = {row["run_id"]: row for row in _grid_cells(page)}
    for r in runs:
        row = shown[r["run_id"]]
        assert row["metrics.step_time_s"] == f"{1000 * r['metrics']['step_time_s']:.1f}"
        if r["metrics"].get("comm_share") is not None:
            assert row["metrics.comm_share"] == f"{100 * r['metrics']['comm_share']:.1f}%"
    heads = page.locator("#runs-grid th.dash-header").all_inner_texts()
    assert any("step ms" in h for h in heads)
    x = page.locator("#sweeps-x").inner_text().strip()
    y = page.locator("#sweeps-y").inner_text().strip()
    assert x == "world_size" and y and y != x
    page.wait_for_selector("#sweeps-heatmap .main-svg", timeout=60_000)
    assert p.errors == []
    page.close()


@pytest.mark.msrun
def test_ticked_runs_open_in_compare(dashboard, browser, sweep_store):
    runs = _ok_runs(sweep_store)
    p = Page(browser)
    page = p.open(dashboard + "/", "#runs-grid td")
    ids = page.locator('#runs-grid td[data-dash-column="run_id"]').all_inner_texts()
    boxes = page.locator("#runs-grid td.dash-select-cell input")
    boxes.nth(0).check()
    boxes.nth(len(ids) - 1).check()
    want = [ids[0].strip(), ids[-1].strip()]
    page.wait_for_function(
        "(w) => document.querySelector('#sweeps-compare-link').innerText.includes(w)", arg=want[1], timeout=30_000
    )
    # the nav bar's Compare link (no runs in its URL) opens with the ticked runs
    page.locator("#nav-compare").click()
    page.wait_for_selector("#compare-metrics td", timeout=60_000)
    assert page.locator("#compare-link-a").inner_text() == want[0]
    assert page.locator("#compare-link-b").inner_text() == want[1]
    assert f"a={want[0]}" in page.url and f"b={want[1]}" in page.url
    assert {r["run_id"] for r in runs} >= set(want)
    assert p.errors == []
    page.close()


def _synthetic_store(root, n_runs=60):
    """A store written through the Store API (what ingest writes): runs over world size x comm_fusion, one run
    with a slow-ranks table whose flagged rows come last in the stored order, and its advice."""
    import pandas as pd

    store = Store(root)
    rid = None
    for i in range(n_runs):
        ws, fusion = (1, 2, 4)[i % 3], (0, 32)[(i // 3) % 2]
        rid = f"syn-ws{ws}-f{fusion}-r{i}"
        st = 0.1 * (1 + i / 100)
        store.write_run(
            {
                "run_id": rid,
                "sweep_id": "syn",
                "source": "sweep",
                "status": "ok",
                "error": None,
                "settings": {
                    "workload": "resnet50",
                    "world_size": ws,
                    "parallel.comm_fusion": fusion,
                    "repeat": i // 6,
                },
                "config": {"train": {"warmup_steps": 1}},
                "metrics": {"throughput": 8 * ws / st, "step_time_s": st, "comm_share": 0.25 + i / 1000},
            }
        )
    rows = [
        {
            "group": "world",
            "scope": "collective",
            "op_name": f"AllReduce-op{k}",
            "rank": k % 4,
            "ranks_compared": 4,
            "n_ops": 4,
            "mean_lateness_ms": 0.1,
            "test": "dixon_q",
            "slow": False,
        }
        for k in range(40)
    ]
    rows += [
        {
            "group": "world",
            "scope": "group",
            "op_name": "",
            "rank": 3,
            "ranks_compared": 4,
            "n_ops": 40,
            "mean_lateness_ms": 25.0,
            "test": "dixon_q",
            "slow": True,
        }
    ]
    store.write_table(rid, "slow_ranks", pd.DataFrame(rows))
    store.write_table(
        rid,
        "advice",
        pd.DataFrame(
            [
                {
                    "rule": "free_time",
                    "severity": "medium",
                    "message": "12% of step time is free",
                    "evidence": "step_breakdown",
                },
                {
                    "rule": "slow_rank",
                    "severity": "high",
                    "message": "rank 3 arrives last at collectives",
                    "evidence": "slow_ranks: rank 3, mean lateness 25 ms",
                },
            ]
        ),
    )
    return rid


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("syn") / "results"
    rid = _synthetic_store(root)
    with serve(root) as base:
        yield base, rid


def test_slow_ranks_flagged_rows_first_and_the_verdict(synthetic, browser):
    base, rid = synthetic
    p = Page(browser)
    page = p.open(f"{base}/run/{rid}", "#run-slow_ranks td")
    assert page.locator("#run-slow_ranks-count").inner_text().startswith("1 of 41 tests flagged a slow rank")
    first = page.locator("#run-slow_ranks tbody tr:has(td) >> nth=0")
    assert first.locator('td[data-dash-column="slow"]').inner_text().strip() == "yes"
    assert first.locator('td[data-dash-column="rank"]').inner_text().strip() == "3"
    verdict = page.locator("#run-verdict").inner_text()  # the high-severity finding leads, with its evidence
    assert "rank 3 arrives last" in verdict and "mean lateness 25 ms" in verdict
    assert "1 more finding" in verdict
    assert p.errors == []
    page.close()


@pytest.fixture(scope="module")
def gains_store(tmp_path_factory):
    """One run whose advice carries gains (analyzers.analyses.advice): two causes, one symptom folded under the
    first."""
    root = tmp_path_factory.mktemp("gains") / "results"
    # a run whose advice carries gains (analyzers.analyses.advice): two causes, one symptom folded under the first
    store = Store(root)
    store.write_run(
        {
            "run_id": "syn-gains",
            "sweep_id": "syn",
            "source": "sweep",
            "status": "ok",
            "error": None,
            "settings": {"workload": "resnet50", "world_size": 4},
            "config": {"train": {"warmup_steps": 1}},
            "metrics": {"step_time_s": 0.1},
        }
    )
    store.write_table(
        "syn-gains",
        "advice",
        pd.DataFrame(
            [
                {
                    "id": "stage_imbalance:1",
                    "rule": "stage_imbalance",
                    "severity": "high",
                    "message": "stage 1 is the bottleneck",
                    "evidence": "stages[stage=1]",
                    "gain_ms": 30.0,
                    "gain_share": 0.3,
                    "basis": "stage above the mean",
                    "symptom_of": None,
                    "try": None,
                    "predicted_step_ms": None,
                },
                {
                    "id": "rank_imbalance:all:computing",
                    "rule": "rank_imbalance",
                    "severity": "high",
                    "message": "ranks of different stages differ",
                    "evidence": "rank_imbalance[group=all]",
                    "gain_ms": 40.0,
                    "gain_share": 0.4,
                    "basis": "spread",
                    "symptom_of": "stage_imbalance:1",
                    "try": None,
                    "predicted_step_ms": None,
                },
                {
                    "id": "small_packets:all",
                    "rule": "small_packets",
                    "severity": "medium",
                    "message": "fuse gradients",
                    "evidence": "comm_ops",
                    "gain_ms": 6.0,
                    "gain_share": 0.06,
                    "basis": "latency terms",
                    "symptom_of": None,
                    "try": '{"parallel.comm_fusion": "all"}',
                    "predicted_step_ms": 94.0,
                },
            ]
        ),
    )
    with serve(root) as base:
        yield base


def test_run_page_ranks_causes_by_gain_with_symptoms_collapsed(gains_store, browser):
    base = gains_store
    p = Page(browser)
    page = p.open(f"{base}/run/syn-gains", "#run-advice")
    verdict = page.locator("#run-verdict").inner_text()
    assert "stage 1 is the bottleneck" in verdict and "saves ~30 ms/step" in verdict
    roots = page.locator("#run-advice > li.advice-root")
    assert roots.count() == 2  # the symptom is not a headline of its own
    assert "stage 1 is the bottleneck" in roots.nth(0).inner_text()
    assert "parallel.comm_fusion=all" in roots.nth(1).inner_text() and "94" in roots.nth(1).inner_text()
    widths = [roots.nth(i).locator(".gain-bar > div").evaluate("e => e.style.width") for i in range(2)]
    assert widths == ["100%", "20%"]  # 30 and 6 ms: bars proportional to the gain
    details = roots.nth(0).locator("details.symptoms")
    assert details.evaluate("e => e.open") is False and "1 symptom" in details.inner_text()
    assert p.errors == []
    page.close()


def test_sweeps_grid_pages_on_the_server_and_axes_default_to_two_swept_settings(synthetic, browser):
    base, _ = synthetic
    p = Page(browser)
    page = p.open(base + "/", "#runs-grid td")
    assert _grid_rows(page) == 25  # one page, not 60 rows sent to the browser
    assert page.locator("#sweeps-count").inner_text().startswith("60 of 60")
    assert page.locator("#sweeps-x").inner_text().strip() == "world_size"
    assert page.locator("#sweeps-y").inner_text().strip() == "parallel.comm_fusion"
    page.wait_for_function(
        """() => {
        const g = document.querySelector('#sweeps-heatmap .js-plotly-plot');
        return g && g.data && g.data.length && g.data[0].x.length === 3 && g.data[0].y.length === 2;
    }""",
        timeout=60_000,
    )
    # a filter in the shown unit: step ms > 152.5 (= step_time_s > 0.1525, 0.1 x (1 + i/100)): i = 53..59
    flt = page.locator('#runs-grid th.dash-filter[data-dash-column="metrics.step_time_s"] input[type=text]')
    flt.fill(">152.5")
    flt.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#sweeps-count').innerText.startsWith('7 of 60')", timeout=30_000
    )
    assert _grid_rows(page) == 7
    assert p.errors == []
    page.close()


def test_dashboard_refuses_bad_input(tmp_path):
    from tests.support import run_perfbench

    r = run_perfbench("dashboard", "--results", tmp_path / "missing", check=False, timeout=60)
    assert r.returncode == 2 and "no results at" in r.stderr and "Traceback" not in r.stderr
    with socket.socket() as s:  # a port that is taken
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = run_perfbench("dashboard", "--results", tmp_path, "--port", s.getsockname()[1], check=False, timeout=60)
    assert r.returncode == 2 and "cannot listen" in r.stderr


def test_dashboard_module_imports_without_mindspore():
    code = (
        "import sys; import dashboards.app, dashboards.data, perfbench.regress.compare, perfbench.regress.check; "
        "assert 'mindspore' not in sys.modules, 'mindspore imported'"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_host_other_than_loopback_warns(tmp_path):
    """--host 0.0.0.0 prints a warning before serving (checked by starting and stopping it)."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbench",
            "dashboard",
            "--results",
            str(tmp_path),
            "--port",
            str(port),
            "--host",
            "0.0.0.0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = proc.stderr.readline().decode()
    finally:
        proc.terminate()
        proc.wait(15)
    assert "warning" in line and "0.0.0.0" in line


#: records when a selector first appears in the DOM (performance.now() ms), before any page script runs
_APPEARS = """window.__appeared = {}; new MutationObserver(() => { for (const s of %s) {
    if (!(s in window.__appeared) && document.querySelector(s)) window.__appeared[s] = performance.now(); } })
    .observe(document, {subtree: true, childList: true});"""


@pytest.mark.parametrize(
    "path,first,chart",
    [
        ("/", "#runs-grid td", "#sweeps-heatmap .main-svg"),
        ("/scaling", "#scaling-table td", "#scaling-throughput .main-svg"),
    ],
)
def test_first_view_comes_with_the_layout_and_plotly_only_after_it_painted(synthetic, browser, path, first, chart):
    """The page's content is rendered into the initial layout (no router callback before the first paint) and
    plotly.js is requested only after the page's first content is in the DOM."""
    base, _ = synthetic
    p = Page(browser)
    posts = []
    p.page.on("request", lambda r: posts.append(r.post_data or "") if "_dash-update-component" in r.url else None)
    p.page.add_init_script(_APPEARS % repr([first]).replace("'", '"'))
    page = p.open(base + path, chart)
    assert not [b for b in posts if "_pages_content" in b], "the page waited for Dash's router callback"
    first_at = page.evaluate(f"() => window.__appeared[{first!r}]")
    plotly_at = page.evaluate(
        "() => performance.getEntriesByType('resource').find(e => e.name.includes('plotly')).startTime"
    )
    assert first_at is not None and plotly_at > first_at, (first_at, plotly_at)
    assert p.errors == []
    page.close()


def test_pages_follow_the_address_bar(synthetic, browser):
    """Navigation after the server-rendered first view: nav links, back, and a layout request whose Referer is
    another page (the clientside check re-routes to the address bar's page)."""
    base, _ = synthetic
    p = Page(browser)
    page = p.open(base + "/scaling", "#scaling-table td")
    page.click("#nav-sweeps")
    page.wait_for_selector("#runs-grid td", timeout=60_000)
    assert page.title() == "perfbench · sweeps"
    page.go_back()
    page.wait_for_selector("#scaling-table td", timeout=60_000)
    assert page.locator("#runs-grid").count() == 0
    page.goto(base + "/?sweep=syn")  # the query string reaches the server-rendered page
    page.wait_for_selector("#runs-grid td", timeout=60_000)
    assert page.locator("#sweeps-sweep").inner_text().strip() == "syn"
    assert p.errors == []
    page.close()
    ctx = browser.new_context(extra_http_headers={"Referer": base + "/scaling"})
    try:
        page = ctx.new_page()
        page.goto(base + "/")
        page.wait_for_selector("#runs-grid td", timeout=60_000)
        assert page.locator("#scaling-page").count() == 0
    finally:
        ctx.close()
