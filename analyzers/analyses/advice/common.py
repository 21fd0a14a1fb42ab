"""Helpers the advice rules share over the analysis tables (no rule's logic, no threshold)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.analyses.advice.rule import LOAD_EXCESS_KEY
from analyzers.stats import union_length


def table(tables, name: str, *cols: str) -> pd.DataFrame | None:
    """The table `name`, or None when it is missing, not a table, empty or without one of the columns `cols` (the
    columns the caller reads)."""
    df = (tables or {}).get(name)
    if df is None or not isinstance(df, pd.DataFrame) or df.empty or not set(cols) <= set(df.columns):
        return None
    return df


def num(df: pd.DataFrame, col: str) -> pd.Series:
    """Column `col` as numbers (NaN where missing or not a number)."""
    if col not in df.columns:
        return pd.Series([math.nan] * len(df), index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce")


def fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def step_ms(summary) -> float | None:
    """The run's step time in ms (summary step_time_s), None when unknown."""
    v = (summary or {}).get("step_time_s")
    return float(v) * 1000.0 if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def n_steps(tables) -> int | None:
    """Profiled steps the comm_ops table covers (the divisor turning totals into per-step gains)."""
    co = table(tables, "comm_ops", "step")
    if co is None:
        return None
    n = int(pd.to_numeric(co["step"], errors="coerce").nunique())
    return n or None


def stage_of(tables) -> dict[int, int]:
    """Rank -> its pipeline stage (rank_stages)."""
    rs = table(tables, "rank_stages")
    return {int(r): int(s) for r, s in zip(rs["rank"], rs["stage"]) if pd.notna(s)} if rs is not None else {}


def spans_stages(ranks, stages: dict[int, int]) -> bool:
    """The ranks sit on more than one known pipeline stage (`stages`: rank -> stage, stage_of): ranks of different
    stages do different work by design, so a spread or a lateness between them is the pipeline split's."""
    return len({stages.get(int(r)) for r in ranks} - {None}) > 1


def excess_ms_per_step(time_ms: float, size_mb: float, gbps: float, steps: int | None) -> float | None:
    """ms per step a transfer took beyond the same bytes at `gbps` (MB / (GB/s) = ms): max(time - size / gbps, 0)
    / steps; None when the steps are unknown or the bandwidth is not positive."""
    if not steps or not gbps > 0:
        return None
    return max(float(time_ms - size_mb / gbps), 0.0) / steps


def stage_ranks(tables, stage) -> list[int]:
    """The ranks of one pipeline stage (rank_stages)."""
    rs = table(tables, "rank_stages")
    if rs is None:
        return []
    return sorted(int(r) for r, s in zip(rs["rank"], rs["stage"]) if pd.notna(s) and int(s) == int(stage))


def trusted(sb: pd.DataFrame | None) -> pd.DataFrame | None:
    """The step breakdown without the ranks marked inconsistent (None when nothing is left)."""
    if sb is None or "consistent" not in sb.columns:
        return sb
    keep = sb["consistent"].astype("boolean").fillna(True).astype(bool)
    return sb[keep] if keep.any() else None


def breakdown_share(tables, col):
    """(share of the step time in breakdown part `col`, the trusted breakdown rows that know it), or None."""
    sb = trusted(table(tables, "step_breakdown"))
    if sb is None or "step_us" not in sb.columns or col not in sb.columns:
        return None
    if not num(sb, "computing_us").sum() > 0:
        return None  # no compute ops were profiled: the breakdown says nothing about idle or exposed time
    known = num(sb, col).notna()  # steps whose part is unknown (null) say nothing about its share
    step = num(sb, "step_us")[known].sum()
    if not step > 0:
        return None
    return float(num(sb, col)[known].sum() / step), sb[known]


def budget_part(sb: pd.DataFrame | None, col: str) -> float | None:
    """ms per step of one breakdown part: median over steps per rank, the largest rank (null when unknown)."""
    if sb is None or col not in sb.columns or "rank" not in sb.columns:
        return None
    v = pd.DataFrame({"rank": sb["rank"], "v": num(sb, col)}).dropna()
    if v.empty:
        return None
    return float(v.groupby("rank")["v"].median().max()) / 1000.0


def exposure_split(tables, sb: pd.DataFrame):
    """(p2p share of the exposed communication, per-rank table with stage) over the trusted ranks, from
    comm_exposure; (None, None) when the split is unknown."""
    ex = table(tables, "comm_exposure")
    if ex is None:
        return None, None
    ex = ex[ex["rank"].isin(sb["rank"].unique())].dropna(subset=["exposed_p2p_us", "exposed_us"])
    if ex.empty or not ex["exposed_us"].sum() > 0:
        return None, None
    # median over steps: the first profiled step often carries compile waits (seconds of receive)
    per = ex.groupby("rank")[["exposed_us", "exposed_p2p_us"]].median()
    per["exposed_collective_us"] = per["exposed_us"] - per["exposed_p2p_us"]
    stages = stage_of(tables)
    per["stage"] = [stages.get(int(r)) for r in per.index]
    tot = per["exposed_us"].sum()
    return (float(per["exposed_p2p_us"].sum() / tot) if tot > 0 else None), per


def transfer_ms(co: pd.DataFrame) -> pd.Series:
    """Time a collective spends moving data: transit_ms, else elapse_ms - wait_ms (waiting is not its cost)."""
    t = num(co, "transit_ms")
    return t if not t.isna().all() else num(co, "elapse_ms") - num(co, "wait_ms").fillna(0.0)


def is_p2p(op_type: pd.Series) -> pd.Series:
    """Pipeline send/receive (their waits are the pipeline bubble, not peers being late)."""
    return op_type.astype(str).str.lower().isin(["send", "recv"])


def fastest(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (columns op_type, n, size, t) with `floor`: the least time a collective of its kind and group size
    took at its size or any larger one (a larger message is never cheaper, so a larger one's time bounds it). A
    loaded machine only adds time to a collective (its ranks wait for a core); the floor is what it costs. (The
    fusion fit keeps each size's own minimum: floors borrowed from larger sizes flatten its latency term.)"""
    mins = df.groupby(["op_type", "n", "size"], as_index=False)["t"].min().sort_values(["op_type", "n", "size"])
    mins["floor"] = mins.groupby(["op_type", "n"])["t"].transform(lambda v: v[::-1].cummin()[::-1])
    return df.merge(mins[["op_type", "n", "size", "floor"]], on=["op_type", "n", "size"], how="left")


def on_cpu(tables) -> bool:
    """The run's operators ran on the host CPU (the MindSpore CPU profile: every op's core_type is CPU)."""
    ops = table(tables, "ops_for_checks", "core_type")
    if ops is None:
        return False
    return bool((ops["core_type"].astype(str).str.upper() == "CPU").all())


def covered_excess_ms(start_us: np.ndarray, elapse_ms: np.ndarray, excess_ms: np.ndarray) -> float:
    """ms of wall time a set of collectives (one rank's, one step's) took beyond their floors: the time their
    intervals [start, start + elapse] cover less the time they cover each cut short by its own excess ([start,
    start + elapse - excess]; `union_length`). Collectives one after another (MindSpore's): the summed excess;
    collectives that ran at once on several threads (gloo's worker threads run several buckets' all-reduces at
    once) waited for a core together, and the step lost that wait once."""
    st = np.asarray(start_us, dtype=float)
    en = st + np.asarray(elapse_ms, dtype=float) * 1000.0
    short = en - np.clip(np.asarray(excess_ms, dtype=float), 0.0, None) * 1000.0
    return max(union_length(st, en) - union_length(st, np.maximum(short, st)), 0.0) / 1000.0


def load_excess_ms(tables) -> float | None:
    """ms per step the collectives took beyond the fastest of their kind and group size at their size or larger
    (`fastest`; per rank and step the wall time they covered beyond those floors, `covered_excess_ms`, where every
    start and elapse is known, else the sum of transfer time - that floor; the median over ranks and steps): on a
    loaded host the time their ranks waited for a core, which neither hiding nor compressing them removes (fusing
    them does: small_packets). Only where the operators ran on the host CPU (`on_cpu`): on an accelerator the spread
    among same-size collectives has other causes (peers arriving late, link contention) that the communication
    findings own: 0 there). None when unknown: no operators to tell where they ran, no collectives table, or no
    collective with its size, time and step."""
    if table(tables, "ops_for_checks", "core_type") is None:
        return None
    if not on_cpu(tables):
        return 0.0
    co = table(tables, "comm_ops", "rank", "step", "op_type", "size_bytes")
    if co is None:
        return None
    df = pd.DataFrame(
        {
            "rank": co["rank"],
            "step": co["step"],
            "op_type": co["op_type"].astype(str).str.lower(),
            "n": pd.to_numeric(co["group_size"], errors="coerce") if "group_size" in co.columns else 0,
            "size": num(co, "size_bytes"),
            "t": transfer_ms(co),
            "start": num(co, "start_us"),
            "elapse": num(co, "elapse_ms"),
        }
    )
    df = df[~df["op_type"].isin(["send", "recv"])]
    if df.empty:
        return 0.0  # no collective but pipeline sends and receives: none waited
    df = df.dropna(subset=["size", "t", "step"])
    if df.empty:
        return None
    df["n"] = df["n"].fillna(0)
    df = fastest(df)
    df["excess"] = (df["t"] - df["floor"]).clip(lower=0.0)
    per = []
    for _, g in df.groupby(["rank", "step"]):
        if g["start"].notna().all() and g["elapse"].notna().all():
            per.append(covered_excess_ms(g["start"].to_numpy(), g["elapse"].to_numpy(), g["excess"].to_numpy()))
        else:
            per.append(float(g["excess"].sum()))
    v = float(np.median(per))
    return v if v > 0 else 0.0


def with_load_excess(tables) -> dict:
    """`tables` with the load excess (load_excess_ms; None when unknown) under LOAD_EXCESS_KEY, computed here once
    for the time budget and every rule that reads it (`load_excess`)."""
    tables = dict(tables or {})
    if LOAD_EXCESS_KEY not in tables:
        tables[LOAD_EXCESS_KEY] = load_excess_ms(tables)
    return tables


def load_excess(tables) -> float | None:
    """The load excess `advise` computed (LOAD_EXCESS_KEY; with_load_excess; None there when unknown), else computed
    here (a rule or the budget called on its own)."""
    tables = tables or {}
    if LOAD_EXCESS_KEY not in tables:
        return load_excess_ms(tables)
    v = tables[LOAD_EXCESS_KEY]
    return None if v is None or not math.isfinite(float(v)) else float(v)
