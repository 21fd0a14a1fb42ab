"""The file `perfbench report` writes, opened with file:// in a real headless Chromium (Debian's /usr/bin/chromium
driven by Playwright): no console error, no network request, plotly charts drawn."""

from __future__ import annotations

import os

import pytest

from perfbench.cli import main
from tests.support import fixture_path

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

CHROMIUM = os.environ.get("PERFBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
B1 = ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("report-ui")
    res, out = root / "res", root / "report.html"
    assert main(["analyze", str(fixture_path(*B1)), "--results", str(res)]) == 0
    assert main(["report", "analyze-level1", "--results", str(res), "-o", str(out)]) == 0
    return out


def open_offline(path):
    """Open `path` with file:// in headless Chromium, every other request counted and refused: (console and page
    errors, requests, plotly charts, bar points, heat map images, the verdict's text)."""
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the test set-up must `apt-get install -y chromium`")
    url = path.resolve().as_uri()
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url) if r.url != url else None)

            def route(r):  # every request but the file itself is counted and refused
                if r.request.url == url:
                    r.continue_()
                else:
                    requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(url)
            page.wait_for_selector(".plotly .main-svg", timeout=60_000)
            page.wait_for_timeout(500)
            return (
                errors,
                requests,
                page.locator(".js-plotly-plot").count(),
                page.locator(".js-plotly-plot .barlayer .point").count(),
                page.locator(".js-plotly-plot .heatmaplayer image, .js-plotly-plot .hm image").count(),
                page.locator(".verdict").first.inner_text(),
            )
        finally:
            browser.close()


def test_report_opens_offline_with_charts_and_no_errors(report_file):
    errors, requests, charts, bars, heat, verdict = open_offline(report_file)
    assert errors == []
    assert requests == []
    assert charts == 4  # breakdown, comm matrix, timeline, memory
    assert bars >= 2 * 3 + 2 + 2 * 2  # 2 ranks x 3 breakdown parts, 2 memory bars, timeline segments
    assert heat >= 1
    assert "communication not hidden behind compute" in verdict


def test_sweep_report_opens_offline(report_file, tmp_path):
    from tests.golden.test_report_cli import _sweep

    res, out = tmp_path / "res", tmp_path / "sweep.html"
    _sweep(res, tables_of=(report_file.parent / "res", "analyze-level1"))
    assert main(["report", "swp", "--results", str(res), "-o", str(out)]) == 0
    errors, requests, charts, _bars, heat, _verdict = open_offline(out)
    assert errors == [] and requests == []
    assert charts == 6 and heat >= 1  # scaling, comm_fusion; the fastest run's breakdown, matrix, timeline, memory
