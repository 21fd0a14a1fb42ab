"""Issue 22: shared names have one home. Bandwidth is size / time with unknown (time not > 0) as NaN, never 0.0;
the warm-up steps come from the run config in one place; the per-view metric lists come from the catalogue;
each analysis table has one writer in the registry. Expected values are written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analyzers.schema import bandwidth_gbps, warmup_steps


def test_bandwidth_is_size_over_time_and_unknown_without_time():
    assert bandwidth_gbps(3.0, 1.5) == 2.0  # 3 MB in 1.5 ms = 2 GB/s
    assert math.isnan(bandwidth_gbps(3.0, 0.0)) and math.isnan(bandwidth_gbps(3.0, -1.0))
    got = bandwidth_gbps(pd.Series([10.0, 5.0, 1.0], index=[7, 8, 9]), pd.Series([4.0, 0.0, None], index=[7, 8, 9]))
    assert list(got.index) == [7, 8, 9] and got[7] == 2.5 and got[8:].isna().all()
    assert np.isnan(bandwidth_gbps(np.array([1.0, 2.0]), np.array([0.5, 0.0]))).tolist() == [False, True]


def test_collectives_and_link_totals_leave_a_zero_time_unknown():
    """Before: 0.0 GB/s in the collectives' per-rank totals and the link totals for a zero time."""
    from analyzers.analyses.collectives import rank_totals
    from analyzers.analyses.parallel_groups import link_totals

    links = pd.DataFrame(
        {
            "step": [1, 1],
            "group": ["g", "g"],
            "src": [0, 1],
            "dst": [1, 0],
            "transport": ["HCCS"] * 2,
            "size_mb": [8.0, 8.0],
            "time_ms": [2.0, 0.0],
            "op_name": ["a", "b"],
            "global_ranks": [True, True],
        }
    )
    tot = link_totals(links).set_index("src")
    assert tot.at[0, "bandwidth_gbps"] == 4.0 and math.isnan(tot.at[1, "bandwidth_gbps"])
    co = pd.DataFrame(
        {
            "rank": [0],
            "step": [1],
            "op_name": ["hcom_allReduce_1"],
            "op_type": ["allreduce"],
            "group": ["g"],
            "elapse_ms": [1.0],
            "transit_ms": [1.0],
            "wait_ms": [0.0],
            "synchronization_ms": [0.0],
            "idle_ms": [0.0],
            "size_bytes": [1e6],
            "group_size": [2],
        }
    )
    bw = pd.DataFrame(
        {
            "rank": [0, 0],
            "step": [1, 1],
            "op_name": ["hcom_allReduce_1"] * 2,
            "transport": ["HCCS", "SDMA"],
            "size_mb": [6.0, 1.0],
            "time_ms": [3.0, 0.0],
        }
    )
    t = rank_totals(co, bw)
    assert t["HCCS_bandwidth_gbps"].iloc[0] == 2.0 and math.isnan(t["SDMA_bandwidth_gbps"].iloc[0])


@pytest.mark.parametrize(
    "config,warm",
    [
        ({"train": {"warmup_steps": 3}}, 3),
        ({"train": {}}, 0),
        (None, 0),
        ({"train": {"warmup_steps": "x"}}, 0),
        ({"train": None}, 0),
    ],
)
def test_warmup_steps_of_a_run_config(config, warm):
    assert warmup_steps(config) == warm


def test_view_metric_lists_come_from_the_catalogue():
    from analyzers import catalogue
    from analyzers.analyses.step_metrics import SERIES_COLUMN
    from perfbench.regress.check import DEFAULT_METRICS

    assert catalogue.KEY_METRICS == (
        "throughput",
        "step_time_s",
        "computing_s",
        "communication_not_overlapped_s",
        "overlapped_s",
        "free_s",
        "comm_share",
        "kernel_utilization",
        "scaling_efficiency",
    )
    assert DEFAULT_METRICS == ("throughput", "step_time_s", "comm_share", "communication_not_overlapped_s")
    assert SERIES_COLUMN is catalogue.SERIES_COLUMN
    assert SERIES_COLUMN["step_cpu_s"] == "cpu_s" and SERIES_COLUMN["collectives_per_step"] == "collectives"
    assert all(catalogue.METRICS[m].series for m in SERIES_COLUMN)


def test_one_writer_per_table():
    from analyzers import registry
    from analyzers.registry import REGISTRY, AnalysisSpec, register, writers

    w = writers(REGISTRY)
    assert w["links"] == "parallel_groups" and w["comm_bandwidth"] == "parallel_groups"
    assert w["comm_ops"] == "collectives"
    with pytest.raises(ValueError, match="'links' is written by analyses 'parallel_groups' and 'extra'"):
        writers([*REGISTRY, AnalysisSpec("extra", lambda ctx: None, tables=("links",))])
    before = list(REGISTRY)
    with pytest.raises(ValueError, match="one writer per table"):
        register(AnalysisSpec("extra", lambda ctx: None, tables=("comm_ops",)))
    assert registry.REGISTRY == before  # a refused entry leaves the registry as it was


def test_the_architecture_map_covers_every_module():
    """docs/architecture.md "Where things live" names every module (a command or a page by its name in its
    package's row), so a new module without a home in the map fails here."""
    from tests.support import ROOT

    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Where things live") : doc.index("## Layers")]
    missing = []
    for pkg in ("perfbench", "analyzers", "workloads", "dashboards"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            rel = path.relative_to(ROOT)
            folder = f"`{rel.parent.as_posix()}/`"
            named = f"`{path.name}`" in section or f", `{path.name}`" in section or path.name in section
            if (
                rel.parent.name in ("commands", "pages")
                or rel.parent.parent.name in ("resnet50", "moe")
                or rel.parent.name in ("resnet50", "moe", "cpu", "ascend", "msprof", "legacy")
            ):
                named = named or path.stem in section or folder.split("/")[-2] + "/" in section
            if not named:
                missing.append(rel.as_posix())
    assert missing == [], missing
