"""Per rank and step time breakdown (the msprof-analyze / Ascend profiler "step trace"), computed from
the device ops themselves, and its reconciliation with what the profiler wrote (step_trace_time.csv,
analysis.db StepTraceTime).

Definitions (same rules as torch_npu's step_trace_time and msprof-analyze's
`MsprofStepTraceTimeDBAdapter` / `RangeCaculator`), per rank and step window W = [start, end]:

    C  = union of compute-op intervals in W          computing_us
    M  = union of communication-op intervals in W    communication_us
    overlapped_us                     = |C ∩ M|
    communication_not_overlapped_us   = |M| - |C ∩ M|
    free_us                           = |W| - |C ∪ M|
    bubble_us                         = sum of durations of pipeline receive ops in W (`is_receive`)
    stage_us                          = |W| - bubble_us
    preparing_us                      = first op start in W - host step start (when the host step is known, else null)

The Ascend parsers set W to the device span of the step (first op start to last op end), as the profiler
does; ops are clipped to W. Ops without a step are assigned to the window they start in. A (rank, step)
without any op is unknown, not idle: its parts are null (the rank had no op data for that step).

Which numbers are reported (`breakdown_with_truth`, the registry's `step_breakdown` analysis): where
the profiler wrote its own breakdown (step_trace_time.csv, analysis.db StepTraceTime, the legacy step
trace), that is the truth (`source` = "profiler"); the recomputation from the ops is a cross-check
(`reconciliation`), and a rank whose recomputed parts differ from the profiler's by more than
`CONSISTENCY_TOLERANCE` of the step time is marked `consistent = False` (`rank_check` says by how much
and why): advice must not rest on it. Ranks without the profiler's breakdown report the recomputation
(`source` = "recomputed", `consistent` null: nothing to check against).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.analyses.pipeline import _cfg
from analyzers.catalogue import ADDING_PARTS
from analyzers.context import Output
from analyzers.schema import BREAKDOWN_PARTS, STEP_BREAKDOWN, conform, empty, step_of
from analyzers.stats import union_length

#: a rank whose recomputed breakdown differs from the profiler's by more than this share of the step is inconsistent
CONSISTENCY_TOLERANCE = 0.01

METRICS = [f"{p}_us" for p in BREAKDOWN_PARTS] + ["stage_us"]


#: op names / types of pipeline receives (HCCL hcom_receive*/hcom_recv*, MindSpore graph Receive-opN, ...)
RECEIVE_PREFIXES = ("hcom_receive", "hcom_recv", "receive-op", "receive_op", "recv-op")
RECEIVE_TYPES = ("recv", "receive", "hcom_receive", "hcom_recv")


def is_receive(names: pd.Series, types: pd.Series | None = None) -> np.ndarray:
    """True for pipeline receive ops, by name (any producer's convention) or by normalized op type."""
    if len(names) and not names.isna().any():  # each distinct name classified once (a real trace repeats them)
        codes, uniq = pd.factorize(names.astype(str).to_numpy(dtype=object))
        by_name = np.array([u.lower().rsplit("/", 1)[-1].startswith(RECEIVE_PREFIXES) for u in uniq], dtype=bool)
        hit = by_name[codes]
    else:
        n = names.astype(str).str.lower()
        n = n.str.rsplit("/", n=1).str[-1]  # MindSpore scope names: Default/.../Receive-op12
        hit = n.str.startswith(RECEIVE_PREFIXES).to_numpy(dtype=bool, copy=True)
    if types is not None:
        hit |= types.astype(str).str.lower().isin(RECEIVE_TYPES).to_numpy()
    return hit


def assign_steps(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Step of each op: its own `step` if set, else the window (same rank) its start falls in (schema.step_of)."""
    out = (
        ops["step"].astype("Float64") if "step" in ops.columns else pd.Series(np.nan, index=ops.index, dtype="Float64")
    )
    missing = out.isna()
    if not missing.any() or steps is None or not len(steps):
        return out
    out.loc[missing] = step_of(ops[missing], steps).astype("Float64")
    return out


def step_breakdown(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step) with the STEP_BREAKDOWN columns."""
    if steps is None or not len(steps):
        return empty(STEP_BREAKDOWN)
    ops = ops.copy()
    ops["step"] = assign_steps(ops, steps)
    ops = ops.dropna(subset=["step", "start_us", "dur_us"])
    ops["end_us"] = ops["start_us"] + ops["dur_us"].clip(lower=0)
    ops["_comm"] = ops["category"].eq("communication").fillna(False).to_numpy(dtype=bool)
    ops["_comp"] = ops["category"].eq("compute").fillna(False).to_numpy(dtype=bool)
    ops["_recv"] = ops["_comm"].to_numpy() & is_receive(ops["name"], ops["type"] if "type" in ops.columns else None)
    grouped = ops.groupby(["rank", "step"], sort=False).indices  # positions of each (rank, step)'s ops, in order
    start, end = ops["start_us"].to_numpy(float), ops["end_us"].to_numpy(float)
    is_comm, is_comp = ops["_comm"].to_numpy(dtype=bool), ops["_comp"].to_numpy(dtype=bool)
    is_recv = ops["_recv"].to_numpy(dtype=bool)
    rows = []
    for rec in steps.itertuples(index=False):
        r, s = int(rec.rank), int(rec.step)
        w0, w1 = float(rec.start_us), float(rec.end_us)
        g = grouped.get((r, float(s)))
        if g is None:
            g = grouped.get((r, s))
        row = {"rank": r, "step": s, "step_us": max(w1 - w0, 0.0)}
        if g is None or not len(g):  # no op data for this step: unknown, not idle
            row.update({m: np.nan for m in METRICS})
            rows.append(row)
            continue
        st = np.clip(start[g], w0, w1)
        en = np.clip(end[g], w0, w1)
        comm = is_comm[g]
        comp = is_comp[g]
        c = union_length(st[comp], en[comp])
        m = union_length(st[comm], en[comm])
        both = comm | comp
        cm = union_length(st[both], en[both])
        ov = c + m - cm
        recv = is_recv[g]
        bubble = float(np.sum(en[recv] - st[recv]))
        host0 = getattr(rec, "host_start_us", np.nan)
        first = float(st[both].min()) if both.any() else np.nan
        prep = first - float(host0) if host0 is not None and not pd.isna(host0) and not np.isnan(first) else np.nan
        row.update(
            {
                "computing_us": c,
                "communication_us": m,
                "overlapped_us": ov,
                "communication_not_overlapped_us": m - ov,
                "free_us": row["step_us"] - cm,
                "bubble_us": bubble,
                "stage_us": row["step_us"] - bubble,
                "preparing_us": prep,
            }
        )
        rows.append(row)
    return conform(pd.DataFrame(rows), STEP_BREAKDOWN)


def reconcile(ours: pd.DataFrame, reference: pd.DataFrame | None) -> pd.DataFrame | None:
    """Long table: rank, step, metric, computed_us, reference_us, diff_us, rel_diff (diff / step time)."""
    if reference is None or not len(reference) or not len(ours):
        return None
    ref = reference.copy()
    ref["rank"] = ref["rank"].astype("int64")
    ref["step"] = ref["step"].astype("int64")
    merged = ours.merge(ref, on=["rank", "step"], how="inner", suffixes=("", "_ref"))
    rows = []
    for m in METRICS:
        if m not in ours.columns or m not in ref.columns:
            continue
        a = merged[m].astype(float)
        b = merged[f"{m}_ref"].astype(float)
        denom = merged["step_us"].astype(float).where(merged["step_us"] > 0, np.nan)
        rows.append(
            pd.DataFrame(
                {
                    "rank": merged["rank"],
                    "step": merged["step"],
                    "metric": m.removesuffix("_us"),
                    "computed_us": a,
                    "reference_us": b,
                    "diff_us": a - b,
                    "rel_diff": (a - b) / denom,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else None


def breakdown_from_reference(reference: pd.DataFrame) -> pd.DataFrame:
    """When a profile has no ops (e.g. an imported msprof-analyze cluster table), its breakdown is the one
    the file carries; step_us = stage + bubble if Stage is known, else computing + not-overlapped comm + free."""
    ref = reference.copy()
    for m in METRICS:
        if m not in ref.columns:
            ref[m] = np.nan  # the profiler did not write it: unknown
    total = ref["computing_us"] + ref["communication_not_overlapped_us"] + ref["free_us"]
    given = ref["step_us"] if "step_us" in ref.columns else pd.Series(np.nan, index=ref.index)
    ref["step_us"] = given.fillna(ref["stage_us"] + ref["bubble_us"].fillna(0)).fillna(total)
    ref["rank"] = ref["rank"].astype("int64")
    ref["step"] = ref["step"].astype("int64")
    return conform(ref[[c for c in STEP_BREAKDOWN]], STEP_BREAKDOWN)


def breakdown_with_truth(
    ops: pd.DataFrame | None,
    steps: pd.DataFrame | None,
    reference: pd.DataFrame | None,
    tolerance: float = CONSISTENCY_TOLERANCE,
):
    """(step_breakdown, reconciliation, rank_check): the profiler's own breakdown where it exists, the
    recomputation from the ops elsewhere, and the cross-check between the two (see the module docstring)."""
    has_ops = ops is not None and len(ops) > 0
    has_steps = steps is not None and len(steps) > 0
    has_ref = reference is not None and len(reference) > 0
    computed = (
        step_breakdown(
            ops if has_ops else pd.DataFrame(columns=["rank", "step", "start_us", "dur_us", "category", "name"]), steps
        )
        if has_steps
        else empty(STEP_BREAKDOWN)
    )
    op_ranks = set(ops["rank"].astype(int)) if has_ops else set()
    computed["source"] = np.where(computed["rank"].isin(op_ranks), "recomputed", None)
    if not has_ref:
        sb, rec = computed, None
    else:
        ref = breakdown_from_reference(reference)
        ref["source"] = "profiler"
        keys = pd.MultiIndex.from_frame(ref[["rank", "step"]].astype("int64"))
        own = pd.MultiIndex.from_frame(computed[["rank", "step"]].astype("int64"))
        sb = pd.concat([ref, computed[~own.isin(keys)]], ignore_index=True)
        # a rank whose op data holds no compute op (legacy step traces list only the collectives) has
        # nothing to cross-check the profiler's computing against
        checkable = (
            set(ops.loc[ops["category"] != "communication", "rank"].astype(int))
            if has_ops and "category" in ops.columns
            else op_ranks
        )
        rec = reconcile(computed[computed["rank"].isin(checkable)], reference)
    sb = sb.sort_values(["rank", "step"]).reset_index(drop=True)
    check = rank_check(sb, rec, op_ranks, tolerance)
    sb["consistent"] = sb["rank"].map(check.set_index("rank")["consistent"]) if len(check) else pd.NA
    sb["consistent"] = sb["consistent"].astype("boolean")
    return sb, rec, check


def rank_check(sb: pd.DataFrame, rec: pd.DataFrame | None, op_ranks: set, tolerance: float) -> pd.DataFrame:
    """Per rank: where its breakdown comes from, the largest cross-check difference, consistent or not, and why."""
    ranks = sorted({int(r) for r in sb["rank"]})
    src = sb["source"].groupby(sb["rank"].astype("int64")).first().to_dict()  # first non-null source per rank
    worst: dict[int, dict] = {}
    if rec is not None and len(rec):
        r2 = rec[rec["rel_diff"].notna()]
        if len(r2):
            idx = r2["rel_diff"].abs().groupby(r2["rank"].astype("int64")).idxmax()
            worst = {int(r): rec.loc[i].to_dict() for r, i in idx.items()}
    rows = []
    for r in ranks:
        s = src.get(r)
        row = {
            "rank": r,
            "breakdown_source": None if s is None or s != s else s,
            "ops": r in op_ranks,
            "max_rel_diff": np.nan,
            "worst_metric": None,
            "consistent": pd.NA,
            "reason": None,
        }
        w = worst.get(r)
        if w is not None:
            row["max_rel_diff"] = float(abs(w["rel_diff"]))
            row["worst_metric"] = w["metric"]
            row["consistent"] = bool(row["max_rel_diff"] <= tolerance)
            if not row["consistent"]:
                row["reason"] = (
                    f"the kernels give {w['metric']} {w['computed_us']:.1f} us where the "
                    f"profiler's step trace says {w['reference_us']:.1f} us "
                    f"({row['max_rel_diff']:.1%} of the step; kernel table sampled or incomplete?)"
                )
        elif row["breakdown_source"] == "profiler":
            row["reason"] = "no op data to cross-check the profiler's breakdown"
        elif row["breakdown_source"] is None:
            row["reason"] = "neither op data nor the profiler's breakdown: breakdown unknown"
        else:
            row["reason"] = "no profiler breakdown to cross-check against"
        rows.append(row)
    out = pd.DataFrame(
        rows, columns=["rank", "breakdown_source", "ops", "max_rel_diff", "worst_metric", "consistent", "reason"]
    )
    out["consistent"] = out["consistent"].astype("boolean")
    return out


def rank_breakdown(sb: pd.DataFrame, warmup: int = 0) -> pd.DataFrame:
    """Per rank: median over its steady-state steps of each breakdown part (us), and the step count.
    The one per-rank view `show`, the dashboard and the report print.

    The medians of the parts are taken one by one, so they need not add up to the median step window (e.g. a
    gloo run whose free time and communication trade places from step to step). `step_us` is therefore the sum
    of the adding parts (catalogue ADDING_PARTS, the run-level `breakdown_step_s` on the same basis), so that
    each rank's parts are shares of their own step; `window_us` keeps the median step window as the profiler
    measured it. A rank with one of the adding parts unknown keeps its window as its step."""
    steady = sb[sb["step"] >= warmup]
    sb = steady if not steady.empty else sb
    cols = ["step_us", *[m for m in METRICS if m in sb.columns]]
    out = sb.groupby("rank")[cols].median()
    out["window_us"] = out["step_us"]
    adding = [f"{p.removesuffix('_s')}_us" for p in ADDING_PARTS]
    if all(c in out.columns for c in adding):
        total = out[adding].sum(axis=1, min_count=len(adding))  # NaN when a part is unknown
        out["step_us"] = total.where(total.notna(), out["window_us"])
    out["steps"] = sb.groupby("rank")["step"].nunique()
    if "consistent" in sb.columns:
        out["consistent"] = sb.groupby("rank")["consistent"].first()
    if "source" in sb.columns:
        out["source"] = sb.groupby("rank")["source"].first()
    return out.reset_index()


def unknown_bubble(sb: pd.DataFrame, ops: pd.DataFrame | None, config: dict | None) -> pd.DataFrame:
    """In a pipeline run (config: parallel.pipeline_stages > 1), a recomputed rank with no identifiable
    receive op (e.g. point-to-point done as a Broadcast on CPU) has an unknown bubble, not a zero one."""

    if (_cfg(config, "pipeline_stages") or 1) <= 1 or ops is None or not len(ops) or not len(sb):
        return sb
    recv_ranks = set(
        ops.loc[is_receive(ops["name"], ops["type"] if "type" in ops.columns else None), "rank"].astype(int)
    )
    unknown = (sb["source"] == "recomputed") & ~sb["rank"].astype(int).isin(recv_ranks)
    sb = sb.copy()
    sb.loc[unknown, ["bubble_us", "stage_us"]] = np.nan
    return sb


def analysis(ctx):
    """Registry entry `step_breakdown`."""
    p = ctx.profile
    sb, rec, check = breakdown_with_truth(
        p.ops if p is not None else None,
        p.steps if p is not None else None,
        p.reference_breakdown if p is not None else None,
    )
    sb = unknown_bubble(sb, p.ops if p is not None else None, ctx.config)
    metrics = {}
    if rec is not None and len(rec) and rec["rel_diff"].notna().any():
        metrics["reconciliation_max_rel_diff"] = float(rec["rel_diff"].abs().max())
    return Output(
        tables={
            "step_breakdown": sb,
            "reconciliation": rec,
            "rank_check": check,
            "rank_breakdown": rank_breakdown(sb, ctx.warmup_steps()),
        },
        metrics=metrics,
    )
