"""The one road from raw artifacts to the store, for sweeps, `perfbench analyze` and tune:

    detect the profile format (analyzers.load_profile: MindSpore CPU or any Ascend format) → parse →
    every registered analysis (analyzers.analyze) → tables + run-level metrics → store

`ingest_run` reads what a launched run left behind (the workload's own step records, spans, meta and
the profiler output under artifacts/profile); `store_analysis` writes an analysis into the store. A
sweep on Ascend therefore stores the Ascend analysis through the same code the fixtures test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

import analyzers
from perfbench.errors import UserError
from perfbench.records import RANK_DETAIL_TABLES, rank_detail_name
from perfbench.store import DamagedTableError, Store

#: parsed profile tables kept beside the analysis tables (for the merged trace and re-analysis)
PROFILE_TABLES = ("ranks", "steps", "ops")


def read_jsonl(files: list[Path]) -> pd.DataFrame:
    rows = []
    for f in files:
        with open(f, errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash: the steps before it still count
    return pd.DataFrame(rows)


def read_workload_steps(metrics_dir: Path) -> pd.DataFrame:
    return read_jsonl(sorted(metrics_dir.glob("rank*.steps.jsonl")))


def read_spans(metrics_dir: Path) -> pd.DataFrame:
    return read_jsonl(sorted(metrics_dir.glob("rank*.spans.jsonl")))


def read_meta(metrics_dir: Path) -> dict[int, dict]:
    out = {}
    for f in sorted(metrics_dir.glob("rank*.meta.json")):
        try:
            m = json.loads(f.read_text())
            out[int(m.get("rank", f.name.split(".")[0][4:]))] = m
        except (json.JSONDecodeError, ValueError, OSError):
            continue
    return out


def _profile_root(artifacts: Path) -> Path | None:
    root = artifacts / "profile"
    return root if root.is_dir() and any(p.is_file() for p in root.rglob("*")) else None


def load_run_profile(root: Path, run_config: dict, steps: pd.DataFrame, meta: dict[int, dict]):
    """The run's profiler output, whatever format it is in (CPU on this machine, msprof/Ascend on NPUs)."""

    m0 = meta.get(0, {})
    pmeta = {"world_size": run_config["world_size"], "run_id": run_config.get("run_id")}
    for k in ("comm_dtype_bytes", "comm_group", "comm_size_classes", "parallel_groups"):
        if k in m0:
            pmeta[k] = m0[k]
    return analyzers.load_profile(root, hints={"workload_steps": steps if not steps.empty else None, "meta": pmeta})


def ingest_run(store: Store, run_id: str, run_config: dict) -> tuple[dict, list[str]]:
    """Analyze and store what a launched run left behind; return (metrics, warnings). Reads whatever
    the ranks wrote, so a failed run keeps the steps it finished."""
    art = store.artifacts_dir(run_id)
    metrics_dir = art / "metrics"
    warnings: list[str] = []
    steps = read_workload_steps(metrics_dir)
    spans = read_spans(metrics_dir)
    profile = None
    root = _profile_root(art)
    if root is not None:
        try:
            profile = load_run_profile(root, run_config, steps, read_meta(metrics_dir))
        except UserError as exc:
            warnings.append(f"profile not analyzed: {exc}")
    elif run_config.get("profile", {}).get("enabled") and not steps.empty:
        warnings.append("profiling was enabled but no profiler output was found")
    analysis = store_analysis(store, run_id, profile, steps, spans, run_config, meta=read_meta(metrics_dir))
    warnings += analysis.warnings
    return analysis.summary, warnings


def store_analysis(
    store: Store | None,
    run_id: str,
    profile,
    workload_steps: pd.DataFrame | None,
    spans: pd.DataFrame | None,
    config: dict | None,
    meta: dict | None = None,
):
    """Run every registered analysis and write its tables (and the parsed profile's) into the store.
    Returns the Analysis with `warnings` (the parsers' and the skipped analyses' reasons) attached."""

    ws = workload_steps if workload_steps is not None and not workload_steps.empty else None
    sp = spans if spans is not None and not spans.empty else None
    analysis = analyzers.analyze(profile, workload_steps=ws, spans=sp, config=config, meta=meta or None)
    if store is None:
        return analysis
    if ws is not None:
        store.write_table(run_id, "workload_steps", ws)
    if sp is not None:
        store.write_table(run_id, "spans", sp)
    for name, df in analysis.tables.items():
        if df is not None and len(df):
            store.write_table(run_id, name, df)
    if profile is not None:
        for name in PROFILE_TABLES:
            df = getattr(profile, name)
            if df is not None and len(df):
                store.write_table(run_id, f"profile_{name}", df)
        ref = profile.reference_breakdown
        if ref is not None and len(ref):
            store.write_table(run_id, "reference_breakdown", ref)
    return analysis


def rank_detail(store: Store, run_id: str, rank: int, config: dict | None = None) -> dict[str, pd.DataFrame]:
    """One rank's memory detail (timeline, allocations live at its peak, what holds the peak), computed on
    demand for an import that kept only the ranks' summaries (`perfbench analyze --detail summary`, the default
    above 8 ranks) and cached in the store (tables `detail_rank<R>_<table>`): the first call reads that rank's
    memory files again (the rank's folder from the run's `profile_ranks`; kernels and trace not read), later calls
    read the cache. {} when the rank recorded no memory. A damaged cached table is said on stderr (its file named)
    and the detail computed again from the rank's files, which replaces the cache."""
    marker = rank_detail_name(rank, "done")
    if marker in store.table_names(run_id):
        try:
            return {
                t: df
                for t in RANK_DETAIL_TABLES
                if (df := store.read_table(run_id, rank_detail_name(rank, t))) is not None and len(df)
            }
        except DamagedTableError as e:
            print(f"warning: {e.path}: damaged cached detail, computed again from rank {rank}'s files", file=sys.stderr)
            for t in ("done", *RANK_DETAIL_TABLES):  # the marker first: a cache is whole or absent
                store.delete_table(run_id, rank_detail_name(rank, t))

    ranks = store.read_table(run_id, "profile_ranks")
    if ranks is None or not len(ranks):
        raise UserError(f"{run_id}: no per-rank profile in the store (was it imported with `perfbench analyze`?)")
    row = ranks[ranks["rank"] == rank]
    if not len(row):
        have = sorted(int(r) for r in ranks["rank"])
        raise UserError(f"{run_id}: no rank {rank} (ranks {have[0]}-{have[-1]}, {len(have)} in all)")
    path = Path(str(row["path"].iloc[0]))
    if not path.exists():
        raise UserError(f"rank {rank}: its profile folder {path} is gone (moved or deleted since the import)")
    profile = analyzers.load_profile(path, workers=1, read_trace=False, kernels="none", detail="all")
    tables = analyzers.analyze(profile, config=config, only=("memory",)).tables  # the detail is the memory analysis's
    got = {t: tables[t] for t in RANK_DETAIL_TABLES if tables.get(t) is not None and len(tables[t])}
    for t, df in got.items():
        store.write_table(run_id, rank_detail_name(rank, t), df)
    store.write_table(run_id, marker, pd.DataFrame({"rank": [rank]}))
    return got
