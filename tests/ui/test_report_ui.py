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


def test_report_opens_offline_with_charts_and_no_errors(report_file):
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the test set-up must `apt-get install -y chromium`")
    url = report_file.resolve().as_uri()
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
            charts = page.locator(".js-plotly-plot").count()
            bars = page.locator(".js-plotly-plot .barlayer .point").count()
            heat = page.locator(".js-plotly-plot .heatmaplayer image, .js-plotly-plot .hm image").count()
            verdict = page.locator(".verdict").inner_text()
        finally:
            browser.close()
    assert errors == []
    assert requests == []
    assert charts == 3  # breakdown, comm matrix, memory
    assert bars >= 2 * 3 + 2  # 2 ranks x 3 breakdown parts, 2 memory bars
    assert heat >= 1
    assert "communication not hidden behind compute" in verdict
