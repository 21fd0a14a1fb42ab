"""The dashboard's History page in a real headless Chromium over a hand-written history (the store's
documented entry format, perfbench.regress.history): a throughput series that drops 20% at the 7th of 12 points."""

from __future__ import annotations

import json

import pytest

from tests.ui.test_dashboard_ui import Page, browser, serve  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

VALUES = [100, 101, 99, 100.5, 99.5, 100.2, 80, 81, 79.5, 80.4, 80.1, 79.8]


@pytest.fixture(scope="module")
def history_results(tmp_path_factory):
    results = tmp_path_factory.mktemp("history_page") / "results"
    (results / "history").mkdir(parents=True)
    for i, v in enumerate(VALUES):
        entry = {
            "entry_id": f"e{i:02d}",
            "time": 1_700_000_000 + 3600 * i,
            "commit": f"{i:040x}",
            "label": f"c{i:02d}",
            "ref": f"c{i:02d}",
            "machine": {"host": "ci"},
            "source": {"kind": "sweep", "id": f"s{i}", "via": "check"},
            "runs": [
                {
                    "run_id": f"s{i}-ws1-r0",
                    "status": "ok",
                    "settings": {"world_size": 1, "repeat": 0},
                    "metrics": {"throughput": v},
                    "samples": {},
                    "config_key": "k",
                }
            ],
        }
        (results / "history" / f"e{i:02d}.json").write_text(json.dumps(entry))
    return results


def test_history_page_marks_the_change_point(history_results, browser):  # noqa: F811
    with serve(history_results) as base:
        p = Page(browser)
        page = p.open(base + "/history?metric=throughput", "#history-fig-0 .main-svg")
        page.wait_for_timeout(500)
        assert p.errors == [], p.errors
        changes = page.locator("#history-changes-0 li").all_inner_texts()
        assert len(changes) == 1 and changes[0].startswith("change at c06 (s6-ws1-r0)"), changes
        # segment medians by hand: (100 + 100.2) / 2 = 100.1 before, (80 + 80.1) / 2 = 80.05 after: -20.0%
        assert "100.1 → 80.05 (-20.0%)" in changes[0], changes
        ys = page.evaluate("() => Array.from(document.querySelector('#history-fig-0 .js-plotly-plot').data[0].y)")
        assert ys == VALUES
        shapes = page.evaluate(
            "() => document.querySelector('#history-fig-0 .js-plotly-plot').layout.shapes.map(s => s.x0)"
        )
        assert shapes == [5.5]  # the dashed line between the last point before the change and the first after
        page.close()
