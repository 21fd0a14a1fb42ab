"""Shared names have one home. Bandwidth is size / time with unknown (time not > 0) as NaN, never 0.0;
the warm-up steps come from the run config in one place; the per-view metric lists come from the catalogue;
each analysis table has one writer in the registry. Expected values are written out by hand."""

from __future__ import annotations

import math
import re

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
    """Not 0.0 GB/s in the collectives' per-rank totals and the link totals for a zero time."""
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


def _layer_rows() -> dict[str, tuple[str, str]]:
    """docs/architecture.md's layer table: {layer: (modules cell, may-import cell)}."""
    from tests.support import ROOT

    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Layers") :]
    section = section[: section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("layer", "---"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def _names_in_row(module: str, path, row: str) -> bool:
    """The row names the module: its file (`pkg/x.py`, or `x.py` after its folder's first file), the package
    itself (`pkg` or `pkg/`), or a folder above it (`workloads/`, `perfbench/commands/`)."""
    from tests.support import ROOT

    rel = path.relative_to(ROOT).as_posix()
    folders = [p.as_posix() for p in path.relative_to(ROOT).parents if p.as_posix() != "."]
    if path.name == "__init__.py":
        candidates = [f"`{folders[0]}`", f"`{folders[0]}/`"]
    else:
        candidates = [f"`{rel}`"]
        if f"`{folders[0]}/" in row:  # a row lists one folder's files as `folder/a.py`, `b.py`, ...
            candidates.append(f"`{path.name}`")
    candidates += [f"`{f}/`" for f in folders if path.name != "__init__.py" or f != folders[0]]
    return any(c in row for c in candidates)


def test_the_layer_table_matches_the_layer_test():
    """docs/architecture.md "Layers": one row per layer of tests/unit/test_layers.py, every module the layer test
    puts in a layer named in that layer's row (by file, package or a folder above it), every file a row names
    by path in that layer, and the row's "may import" the layers the test allows."""
    from tests.support import ROOT
    from tests.unit.test_layers import ALLOWED, layer_of, modules

    rows = _layer_rows()
    assert sorted(rows) == sorted(ALLOWED), (sorted(rows), sorted(ALLOWED))
    mods = modules()
    unlisted = [f"{m} ({layer_of(m)})" for m, p in mods.items() if not _names_in_row(m, p, rows[layer_of(m)][0])]
    assert unlisted == [], unlisted
    by_path = {p.relative_to(ROOT).as_posix(): m for m, p in mods.items()}
    wrong = [
        f"{path} is listed under {layer} but the layer test puts it in {layer_of(by_path[path])}"
        for layer, (cell, _) in rows.items()
        for path in re.findall(r"`([\w/]+\.py)`", cell)
        if path in by_path and layer_of(by_path[path]) != layer
    ]
    assert wrong == [], wrong
    named = {p for cell, _ in rows.values() for p in re.findall(r"`([\w/]+/[\w]+\.py)`", cell)}
    assert named <= set(by_path), sorted(named - set(by_path))
    for layer, (_, may) in rows.items():
        others = ALLOWED[layer] - {layer}
        if may == "nothing of the project":
            said = set()
        elif may.startswith("all but "):
            said = set(ALLOWED) - {layer} - {x.strip() for x in may[len("all but ") :].split(",")}
        else:
            said = {x.strip() for x in may.split(",")}
        assert said == others, f"{layer}: the doc says it may import {may!r}, the layer test allows {sorted(others)}"


def test_the_layer_table_check_catches_a_missing_module():
    """A planning module left out of the planning row is reported; named there, it is found."""
    from tests.unit.test_layers import modules

    path = modules()["workloads.parallel.layout_math"]
    row = "`workloads/parallel/rules.py` (...), `schedules.py` (...)"
    assert not _names_in_row("workloads.parallel.layout_math", path, row)
    assert _names_in_row("workloads.parallel.layout_math", path, row + ", `layout_math.py` (...)")
    assert _names_in_row("workloads.runner", modules()["workloads.runner"], "the rest of `workloads/` (MindSpore)")
    assert not _names_in_row("workloads.runner", modules()["workloads.runner"], "`workloads/parallel/rules.py`")


def test_every_module_the_map_names_exists():
    """docs/architecture.md "Where things live" names no module that is gone (a file name, or a path from the
    repository root)."""
    from tests.support import ROOT

    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Where things live") : doc.index("## Layers")]
    files = [
        p.relative_to(ROOT)
        for d in ("perfbench", "analyzers", "workloads", "dashboards", "tests", "bench")
        for p in (ROOT / d).rglob("*.py")
    ]
    known = {p.name for p in files} | {p.as_posix() for p in files}
    named = set(re.findall(r"`([\w/]+\.py)`", section))
    assert len(named) > 50
    assert sorted(named - known) == [], sorted(named - known)
