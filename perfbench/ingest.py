"""Turn a run's raw artifacts (workload metrics files, CPU profiler output) into store tables and
the run-level metrics kept in run.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.timeline import step_timeline
from perfbench.errors import UserError
from perfbench.store import Store


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


def measured(steps: pd.DataFrame, warmup_steps: int) -> pd.DataFrame:
    """Steps after warm-up that every rank finished."""
    if steps.empty:
        return steps
    s = steps[steps["step"] >= warmup_steps]
    nranks = steps["rank"].nunique()
    complete = s.groupby("step")["rank"].nunique()
    return s[s["step"].isin(complete[complete == nranks].index)]


def per_step_throughput(steps: pd.DataFrame) -> pd.DataFrame:
    """Global samples/s of each step: samples summed over ranks / the slowest rank's step time."""
    g = steps.groupby("step").agg(samples=("samples", "sum"), step_time_s=("step_time_s", "max"))
    g["throughput"] = g["samples"] / g["step_time_s"]
    return g.reset_index()


def workload_metrics(steps: pd.DataFrame, warmup_steps: int) -> dict:
    m = measured(steps, warmup_steps)
    overhead = {}
    if "profiled" in m.columns and len(m):
        prof = m[m["profiled"].astype(bool)]
        unprofiled = m[~m["profiled"].astype(bool)]
        if len(prof) and len(unprofiled):
            # the same run, steps with and without the profiler: its overhead on step time
            t_on = float(per_step_throughput(prof)["step_time_s"].median())
            t_off = float(per_step_throughput(unprofiled)["step_time_s"].median())
            overhead = {"profiled_step_time_s": t_on, "profiler_overhead": t_on / t_off - 1}
        m = unprofiled if len(unprofiled) else m  # profiled steps carry the profiler's overhead
    if m.empty:
        return {}
    per = per_step_throughput(m)
    out = {
        "throughput": float(per["throughput"].median()),
        "step_time_s": float(per["step_time_s"].median()),
        "measured_steps": int(len(per)),
        "samples_per_step": float(per["samples"].median()),
    }
    last = steps.sort_values("step")
    if "loss" in last.columns and last["loss"].notna().any():
        by_step = last.groupby("step")["loss"].mean()
        out["loss_first"] = float(by_step.iloc[0])
        out["loss_last"] = float(by_step.iloc[-1])
    for col, name in (("comm_bytes", "comm_bytes_per_step"), ("collectives", "collectives_per_step")):
        if col in m.columns and m[col].notna().any():
            out[name] = float(m.groupby("step")[col].sum().median() / max(1, m["rank"].nunique()))
    out.update(overhead)
    if "dropped_tokens" in m.columns and m["dropped_tokens"].notna().any():
        out["dropped_tokens_per_step"] = float(m.groupby("step")["dropped_tokens"].sum().median())
    return out


def _profile_root(artifacts: Path) -> Path | None:
    root = artifacts / "profile"
    if root.is_dir() and any(root.rglob("FRAMEWORK")):
        return root
    return None


def ingest_run(store: Store, run_id: str, run_config: dict) -> tuple[dict, list[str]]:
    """Write the run's tables; return (metrics, warnings). Reads whatever the ranks left behind,
    so a failed run keeps the steps it finished."""
    art = store.artifacts_dir(run_id)
    metrics_dir = art / "metrics"
    warnings: list[str] = []
    steps = read_workload_steps(metrics_dir)
    spans = read_spans(metrics_dir)
    meta = read_meta(metrics_dir)
    if not steps.empty:
        store.write_table(run_id, "workload_steps", steps)
    if not spans.empty:
        store.write_table(run_id, "spans", spans)
    metrics = workload_metrics(steps, run_config["train"]["warmup_steps"]) if not steps.empty else {}
    root = _profile_root(art)
    if root is None:
        if run_config.get("profile", {}).get("enabled") and not steps.empty:
            warnings.append("profiling was enabled but no profiler output was found")
        metrics.update(_workload_analyses(store, run_id, run_config, steps, spans))
        return metrics, warnings
    try:
        import analyzers
        from analyzers.cpu import parse

        m0 = meta.get(0, {})
        pmeta = {"world_size": run_config["world_size"], "run_id": run_id}
        for k in ("comm_dtype_bytes", "comm_group"):
            if k in m0:
                pmeta[k] = m0[k]
        profile = parse(root, workload_steps=steps if not steps.empty else None, meta=pmeta)
        analysis = analyzers.analyze(profile, workload_steps=steps if not steps.empty else None,
                                     spans=spans if not spans.empty else None, config=run_config)
    except UserError as exc:
        warnings.append(f"profile not analyzed: {exc}")
        return metrics, warnings
    for name, df in analysis.tables.items():
        if df is not None and len(df):
            store.write_table(run_id, name, df)
    timeline = step_timeline(profile.ops, profile.steps)
    if len(timeline):
        store.write_table(run_id, "timeline", timeline)
    for k, v in analysis.summary.items():
        metrics.setdefault(k, _plain(v))  # the workload's own throughput/step time win
    return metrics, warnings


def _workload_analyses(store: Store, run_id: str, run_config: dict, steps: pd.DataFrame, spans: pd.DataFrame) -> dict:
    """Analyses that need only the workload's own records (no profile): pipeline bubble from the
    spans, expert load from the per-step token counts."""
    from analyzers.experts import expert_load, mean_expert_cv
    from analyzers.pipeline import mean_bubble_fraction, pipeline_bubbles

    out = {}
    pipe = pipeline_bubbles(None, spans, run_config) if not spans.empty else None
    if pipe is not None and len(pipe):
        store.write_table(run_id, "pipeline", pipe)
        out["bubble_fraction"] = _plain(mean_bubble_fraction(pipe))
    experts = expert_load(steps, warmup_steps=run_config["train"]["warmup_steps"]) if not steps.empty else None
    if experts is not None and len(experts):
        store.write_table(run_id, "experts", experts)
        out["expert_load_cv"] = _plain(mean_expert_cv(experts))
    return {k: v for k, v in out.items() if v is not None}


def _plain(v):
    if isinstance(v, (np.generic,)):
        return v.item()
    if isinstance(v, float) and np.isnan(v):
        return None
    return v
