"""The dashboard at 1,280 x 800 in a real headless Chromium, over the session's real sweep: the Sweeps grid shows
its key columns (run, status, steadiness, top finding, world size, samples/s, step ms, scaling, comm share) without
horizontal scrolling, and the Run page's verdict is on the first screen. Checked from the DOM's geometry;
screenshots go to the test's tmp dir."""

from __future__ import annotations

import pytest

from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.store import Store
from tests.ui.test_dashboard_ui import CHROMIUM, CHROMIUM_ARGS, serve

pytestmark = [pytest.mark.browser, pytest.mark.timeout(1800)]

VIEWPORT = {"width": 1280, "height": 800}
KEY_COLUMNS = (
    "run_id",
    "status",
    "steady",
    "finding",
    "settings.world_size",
    "metrics.throughput",
    "metrics.step_time_s",
    "metrics.scaling_efficiency",
    "metrics.comm_share",
)


def shot(page, path) -> None:
    """The first screen as a PNG (after the checks: on a loaded machine a page of plotly charts can take a while)."""
    page.screenshot(path=str(path), animations="disabled", timeout=180_000)


def grid_geometry(page) -> dict:
    """{column id: [left, right] of its header cell} and the viewport's width, as laid out."""
    return page.evaluate("""() => ({
        width: document.documentElement.clientWidth,
        scrollX: window.scrollX,
        cols: Object.fromEntries([...document.querySelectorAll('#runs-grid th[data-dash-column]')]
            .filter(th => th.closest('tr').querySelector('.column-header-name'))
            .map(th => { const r = th.getBoundingClientRect(); return [th.dataset.dashColumn, [r.left, r.right]]; })),
        cells: [...document.querySelectorAll('#runs-grid tbody tr')]
            .filter(tr => tr.querySelector('td[data-dash-column="run_id"]'))
            .map(tr => Object.fromEntries([...tr.querySelectorAll('td[data-dash-column]')]
                .map(td => [td.dataset.dashColumn, td.innerText.trim()]))),
    })""")


def check_grid(base: str, browser, store, shots) -> None:
    records = store.list_runs()
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(base + "/")
        page.wait_for_selector('#runs-grid td[data-dash-column="run_id"]', timeout=60_000)
        page.wait_for_load_state("networkidle")
        g = grid_geometry(page)
        shot(page, shots / "sweeps-1280x800.png")
        for col in KEY_COLUMNS:
            assert col in g["cols"], (col, sorted(g["cols"]))
            left, right = g["cols"][col]
            assert 0 <= left and right <= g["width"], (col, left, right, g["width"])
        by_id = {c["run_id"]: c for c in g["cells"]}
        assert by_id
        for rec in records:
            cell = by_id.get(rec["run_id"])
            if cell is None:  # (beyond the first page)
                continue
            why = unsteady_reasons(rec.get("metrics") or {})
            assert cell["steady"].startswith("⚠") == bool(why), (rec["run_id"], cell["steady"], why)
            # the top finding: the first root of the stored advice (ranked by gain), by its rule's name
            adv = store.read_table(rec["run_id"], "advice") if "advice" in store.table_names(rec["run_id"]) else None
            roots = adv[adv["symptom_of"].isna()] if adv is not None and len(adv) else None
            if roots is not None and len(roots):
                assert cell["finding"].startswith(str(roots.iloc[0]["rule"]).replace("_", " ")), cell
            else:
                assert cell["finding"] == "-", cell
    finally:
        page.close()


def check_run_page(base: str, browser, rec: dict, shots) -> None:
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(f"{base}/run/{rec['run_id']}")
        page.wait_for_selector("#run-verdict", timeout=60_000)
        page.wait_for_load_state("networkidle")
        box = page.evaluate("""() => { const r = document.querySelector('#run-verdict').getBoundingClientRect();
            return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, h: window.innerHeight,
                    w: document.documentElement.clientWidth,
                    text: document.querySelector('#run-verdict').innerText}; }""")
        assert box["text"].strip()
        assert 0 <= box["top"] and box["bottom"] <= box["h"], box
        assert 0 <= box["left"] and box["right"] <= box["w"], box
        # the steadiness flag of `ls`, with its reasons, under the verdict
        why = unsteady_reasons(rec.get("metrics") or {})
        flag = page.locator("#run-unsteady")
        assert flag.count() == (1 if why else 0)
        if why:
            assert all(w in flag.inner_text() for w in why)
        shot(page, shots / "run-1280x800.png")
    finally:
        page.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.mark.msrun
def test_grid_and_run_verdict_fit_1280_by_800(sweep_store, browser, tmp_path):
    store = Store(sweep_store, create=False)
    ok = [r for r in store.list_runs() if r["status"] == "ok"]
    with serve(sweep_store) as base:
        check_grid(base, browser, store, tmp_path)
        check_run_page(base, browser, next(r for r in ok if r["settings"]["world_size"] == 2), tmp_path)
    assert (tmp_path / "sweeps-1280x800.png").stat().st_size > 0 and (tmp_path / "run-1280x800.png").stat().st_size > 0
