"""Exposed (not overlapped) communication split by op kind: pipeline point-to-point vs collectives.

Per rank and step (table `comm_exposure`):

    exposed_us             communication not hidden behind compute (step_breakdown
                           communication_not_overlapped_us: the profiler's number where it wrote one)
    exposed_p2p_us         the part during which a pipeline point-to-point op runs (send, receive,
                           batchSendRecv, MindSpore Receive-opN / Send-opN)
    exposed_collective_us  the rest: gradient / other collectives (all-reduce, all-gather, ...)
    source                 how the split was made:
      "ops"       from the op timeline: with C = compute ops, P = p2p ops, K = other communication ops
                  (intervals clipped to the step window),  p2p = |P ∪ C| - |C|,  collective =
                  |K ∪ P ∪ C| - |P ∪ C|. Used when the rank has compute and p2p ops in that step.
      "profiler"  the profiler's own split: step_trace_time's "Communication(Not Overlapped and Exclude
                  Receive)" (p2p = exposed - that), MindSpore's cluster pipeline files'
                  collective_communication_alone_time (p2p = exposed - that). The profiler separates
                  receives only: a rank that also ran send / batchSendRecv ops gets source
                  "profiler (receive only)" and its p2p time is a lower bound.
      "no p2p"    the rank ran no p2p op: all exposed communication is collective.
    null when none of these is available.

Run-level metrics: `exposed_p2p_s`, `exposed_collective_s` (mean over ranks and steps, seconds).

Table `comm_exposure_classes` splits by traffic class (the `comm_class` the collectives analysis gives each
collective, analyzers.analyses.parallel_groups.classify_comm_ops): per rank, step and class (null: unclassified),
``time_us`` = |K_class| (union of the class's collectives, clipped to the step) and ``exposed_us`` =
|K_class ∪ C| - |C| (the part no compute op overlaps), with C the rank's compute ops in the step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Output
from analyzers.schema import comm_op_type
from analyzers.stats import union_length

EXPOSURE_COLUMNS = ["rank", "step", "exposed_us", "exposed_p2p_us", "exposed_collective_us", "p2p_share", "source"]
#: op types (analyzers.schema.comm_op_type: batchSendRecv -> send, Receive-opN -> recv) that are p2p
P2P_TYPES = ("send", "recv")
#: reference-breakdown columns that hold the profiler's exposed collective (non-receive) communication
PROFILER_COLLECTIVE_COLUMNS = ("communication_not_overlapped_exclude_receive_us", "collective_not_overlapped_us")


def is_p2p(names: pd.Series) -> np.ndarray:
    """True for pipeline point-to-point ops, by name (any producer's convention)."""
    if len(names) and not names.isna().any():  # each distinct name classified once (a real trace repeats them)
        codes, uniq = pd.factorize(names.astype(str).to_numpy(dtype=object))
        hit = np.array([comm_op_type(u.rsplit("/", 1)[-1]) in P2P_TYPES for u in uniq], dtype=bool)
        return hit[codes]
    short = names.astype(str).str.rsplit("/", n=1).str[-1]
    return short.map(comm_op_type).isin(P2P_TYPES).to_numpy()


def _ranks_with_sends(ops: pd.DataFrame | None, comm_ops: pd.DataFrame | None) -> set:
    """Ranks that ran a p2p op other than a plain receive (send, batchSendRecv)."""
    out: set = set()
    if comm_ops is not None and len(comm_ops) and "op_type" in comm_ops.columns:
        out |= set(comm_ops.loc[comm_ops["op_type"].astype(str).str.lower() == "send", "rank"].astype(int))
    if ops is not None and len(ops) and "category" in ops.columns:
        c = ops[ops["category"] == "communication"]
        names = c["name"].astype(str).str.rsplit("/", n=1).str[-1].str.lower()
        out |= set(c.loc[names.str.contains("send"), "rank"].astype(int))
    return out


def _split_from_ops(ops: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """{(rank, step): (p2p_us, collective_us)} for the (rank, step)s with compute and p2p ops."""
    out: dict = {}
    if ops is None or not len(ops) or "category" not in ops.columns:
        return out
    comm = ops["category"] == "communication"
    p2p = pd.Series(False, index=ops.index)
    p2p[comm] = is_p2p(ops.loc[comm, "name"])
    with_p2p = ops.loc[p2p, ["rank", "step"]].dropna().drop_duplicates()
    if with_p2p.empty:
        return out
    win = {}
    if steps is not None and len(steps):
        win = {
            (int(r), int(s)): (a, b)
            for r, s, a, b in steps[["rank", "step", "start_us", "end_us"]].itertuples(index=False)
        }
    sel = ops[ops["step"].notna()]
    keys = set(map(tuple, with_p2p.astype(int).to_numpy()))
    for (r, s), g in sel.groupby([sel["rank"].astype(int), sel["step"].astype(int)]):
        if (r, s) not in keys:
            continue
        st = g["start_us"].to_numpy(float)
        en = st + g["dur_us"].to_numpy(float)
        if (r, s) in win:
            st, en = np.clip(st, *win[(r, s)]), np.clip(en, *win[(r, s)])
        c = (g["category"] != "communication").to_numpy()
        p = p2p[g.index].to_numpy()
        k = ~c & ~p
        if not c.any():
            continue  # no compute ops: the profiler's breakdown (if any) is the only judge
        cu = union_length(st[c], en[c])
        pc = union_length(st[c | p], en[c | p])
        out[(r, s)] = (pc - cu, union_length(st[c | p | k], en[c | p | k]) - pc)
    return out


def _lookup(ref: pd.DataFrame, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(have, value) for each (rank, step) row of `df`: whether `ref` (rank, step, value; no missing cell) has that
    rank and step, and its value there (the last row of a repeated key; NaN where none), in one indexed pass."""
    rank, step = ref["rank"].to_numpy(dtype="float64"), ref["step"].to_numpy(dtype="float64")
    key = pd.MultiIndex.from_arrays([np.trunc(rank).astype("int64"), np.trunc(step).astype("int64")])
    got = pd.Series(ref.iloc[:, 2].to_numpy(dtype="float64"), index=key)
    got = got[~key.duplicated(keep="last")]
    r, s = df["rank"].to_numpy(dtype="float64"), df["step"].to_numpy(dtype="float64")
    whole = np.isfinite(r) & np.isfinite(s) & (r == np.trunc(r)) & (s == np.trunc(s))  # else no key equals it
    want = pd.MultiIndex.from_arrays([np.where(whole, r, -1).astype("int64"), np.where(whole, s, -1).astype("int64")])
    pos = np.where(whole, got.index.get_indexer(want), -1)
    have = pos >= 0
    vals = np.where(have, got.to_numpy()[np.maximum(pos, 0)], np.nan) if len(got) else np.full(len(df), np.nan)
    return have, vals


def comm_exposure(
    sb: pd.DataFrame | None,
    reference: pd.DataFrame | None,
    ops: pd.DataFrame | None,
    steps: pd.DataFrame | None,
    comm_ops: pd.DataFrame | None,
) -> pd.DataFrame | None:
    """The `comm_exposure` table (see the module docstring)."""
    if sb is None or not len(sb) or "communication_not_overlapped_us" not in sb.columns:
        return None
    df = (
        sb[["rank", "step", "communication_not_overlapped_us"]]
        .rename(columns={"communication_not_overlapped_us": "exposed_us"})
        .copy()
    )
    df["rank"] = df["rank"].astype(int)
    df["step"] = df["step"].astype(int)
    df["exposed_us"] = pd.to_numeric(df["exposed_us"], errors="coerce")
    df["exposed_p2p_us"] = np.nan
    df["source"] = None
    # the profiler's own split
    if reference is not None and len(reference):
        col = next(
            (
                c
                for c in PROFILER_COLLECTIVE_COLUMNS
                if c in reference.columns and pd.to_numeric(reference[c], errors="coerce").notna().any()
            ),
            None,
        )
        if col is not None:
            have, vals = _lookup(reference[["rank", "step", col]].dropna(), df)
            df.loc[have, "exposed_p2p_us"] = (df.loc[have, "exposed_us"] - vals[have]).clip(lower=0)
            df.loc[have, "source"] = "profiler"
            senders = _ranks_with_sends(ops, comm_ops)
            df.loc[have & df["rank"].isin(senders).to_numpy(), "source"] = "profiler (receive only)"
    # the op timeline, where it has compute and p2p ops (names every p2p kind, incl. batchSendRecv)
    split = _split_from_ops(ops, steps)
    for i, (r, s) in enumerate(zip(df["rank"], df["step"])):
        if (r, s) in split:
            p, k = split[(r, s)]
            tot = p + k
            # scale to the breakdown's exposed time so the parts add up to the reported number
            ex = df.at[df.index[i], "exposed_us"]
            df.at[df.index[i], "exposed_p2p_us"] = p * ex / tot if tot > 0 and pd.notna(ex) else p
            df.at[df.index[i], "source"] = "ops"
    # ranks that ran no p2p op at all
    if comm_ops is not None and len(comm_ops):
        typ = comm_ops["op_type"].astype(str).str.lower() if "op_type" in comm_ops.columns else None
        p2p_ranks = set(comm_ops.loc[typ.isin(P2P_TYPES), "rank"].astype(int)) if typ is not None else set()
        p2p_ranks |= (
            set(ops.loc[(ops["category"] == "communication") & is_p2p(ops["name"]), "rank"].astype(int))
            if ops is not None and len(ops) and "category" in ops.columns
            else set()
        )
        none = df["source"].isna() & ~df["rank"].isin(p2p_ranks) & df["exposed_us"].notna()
        df.loc[none, "exposed_p2p_us"] = 0.0
        df.loc[none, "source"] = "no p2p"
    df["exposed_collective_us"] = df["exposed_us"] - df["exposed_p2p_us"]
    df["p2p_share"] = np.where(df["exposed_us"] > 0, df["exposed_p2p_us"] / df["exposed_us"], np.nan)
    return df[EXPOSURE_COLUMNS].reset_index(drop=True)


CLASS_EXPOSURE_COLUMNS = ["rank", "step", "comm_class", "time_us", "exposed_us"]


def exposure_by_class(
    ops: pd.DataFrame | None, steps: pd.DataFrame | None, comm_ops: pd.DataFrame | None
) -> pd.DataFrame | None:
    """The `comm_exposure_classes` table (module docstring); None without classified collectives' times."""
    need = {"rank", "step", "start_us", "elapse_ms", "comm_class"}
    if comm_ops is None or not len(comm_ops) or not need <= set(comm_ops.columns):
        return None
    co = comm_ops.dropna(subset=["step", "start_us", "elapse_ms"])
    if co.empty:
        return None
    win = {}
    if steps is not None and len(steps):
        win = {
            (int(r), int(s)): (a, b)
            for r, s, a, b in steps[["rank", "step", "start_us", "end_us"]].itertuples(index=False)
        }
    comp: dict = {}
    if ops is not None and len(ops) and "category" in ops.columns:
        c = ops[(ops["category"] != "communication") & ops["step"].notna()]
        for (r, s), g in c.groupby([c["rank"].astype(int), c["step"].astype(int)]):
            st = g["start_us"].to_numpy(float)
            comp[(r, s)] = (st, st + g["dur_us"].to_numpy(float))
    rows = []
    cls = co["comm_class"].astype(object).where(co["comm_class"].notna(), None).fillna("(unclassified)")
    for (r, s, k), g in co.groupby([co["rank"].astype(int), co["step"].astype(int), cls]):
        st = g["start_us"].to_numpy(float)
        en = st + g["elapse_ms"].to_numpy(float) * 1000.0
        cst, cen = comp.get((r, s), (np.array([]), np.array([])))
        if (r, s) in win:
            lo, hi = win[(r, s)]
            st, en, cst, cen = np.clip(st, lo, hi), np.clip(en, lo, hi), np.clip(cst, lo, hi), np.clip(cen, lo, hi)
        cu = union_length(cst, cen) if len(cst) else 0.0
        both = union_length(np.concatenate([st, cst]), np.concatenate([en, cen]))
        rows.append(
            {
                "rank": r,
                "step": s,
                "comm_class": None if k == "(unclassified)" else k,
                "time_us": union_length(st, en),
                "exposed_us": both - cu,
            }
        )
    out = pd.DataFrame(rows, columns=CLASS_EXPOSURE_COLUMNS)
    out["comm_class"] = pd.Series([r["comm_class"] for r in rows], index=out.index, dtype=object)
    return out


def run_metrics(exp: pd.DataFrame | None) -> dict:
    out = {"exposed_p2p_s": None, "exposed_collective_s": None}
    if exp is None or not len(exp):
        return out
    for name, col in (("exposed_p2p_s", "exposed_p2p_us"), ("exposed_collective_s", "exposed_collective_us")):
        v = pd.to_numeric(exp[col], errors="coerce").dropna()
        out[name] = float(v.mean() / 1e6) if len(v) else None
    return out


def analysis(ctx):
    """Registry entry `comm_exposure`."""
    p = ctx.profile
    exp = comm_exposure(
        ctx.table("step_breakdown"),
        ctx.table("reference_breakdown"),
        ctx.table("ops"),
        ctx.table("steps"),
        ctx.table("comm_ops"),
    )
    by_class = exposure_by_class(ctx.table("ops"), ctx.table("steps"), ctx.table("comm_ops"))
    return Output(
        tables={"comm_exposure": exp, "comm_exposure_classes": by_class},
        metrics=run_metrics(exp) if p is not None else {},
    )
