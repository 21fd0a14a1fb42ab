"""A stored table that cannot be read back is named on the run page (its file, "damaged table"), as `show` names it,
and the page still draws the rest; a run whose tables all read shows no such line. Hand-built store, no browser."""

from __future__ import annotations

import json

import pandas as pd
import plotly.utils

from dashboards import data
from perfbench.store import Store


def _page_text(component) -> str:
    return json.dumps(component, cls=plotly.utils.PlotlyJSONEncoder)


def test_the_run_page_names_a_damaged_table(tmp_path):
    store = Store(tmp_path, create=True)
    store.write_run(
        {
            "run_id": "r1",
            "sweep_id": "s",
            "source": "sweep",
            "status": "ok",
            "error": None,
            "settings": {"workload": "resnet50", "world_size": 2},
            "config": {"run_id": "r1"},
            "metrics": {"step_time_s": 0.1},
        }
    )
    store.write_table("r1", "slow_ranks", pd.DataFrame({"rank": [0, 1], "slow": [False, True]}))
    store.write_table("r1", "kernels", pd.DataFrame({"name": ["MatMul"], "dur_us": [5.0]}))
    assert store.damaged_tables("r1") == []
    data.configure(tmp_path)
    from dashboards.pages import run

    page = _page_text(run.layout("r1"))
    assert "run-input-problems" not in page and "damaged table" not in page

    path = store.table_path("r1", "slow_ranks")
    path.write_bytes(path.read_bytes()[:40])  # truncated: no Parquet footer
    (line,) = store.damaged_tables("r1")
    assert line.startswith(f"{path}: damaged table (") and "import or run it again" in line
    page = _page_text(run.layout("r1"))
    assert "run-input-problems" in page and json.dumps(line)[1:-1] in page
    assert "MatMul" in page  # the undamaged table's section is still drawn
    kernels = store.table_path("r1", "kernels")
    kernels.write_bytes(b"not a parquet file at all")
    assert [x.split(": damaged")[0] for x in store.damaged_tables("r1")] == [str(kernels), str(path)]
