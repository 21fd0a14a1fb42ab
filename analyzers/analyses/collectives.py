"""Per collective op and rank: time decomposition, wait ratio, algorithm and bus bandwidth.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md), with S = `size_bytes` (the op's payload as the
profiler records it: HCCL `count` x data-type size) and t = `elapse_ms`:

    algbw = S / t                       (GB/s, 1 GB = 1e9 bytes)
    busbw = algbw * factor(op_type, n)  n = group_size
        allreduce                  2 (n-1) / n
        allgather, reducescatter   (n-1) / n
        alltoall(v)                (n-1) / n
        broadcast, reduce          1
        send, recv                 1

`wait_ratio = wait / (wait + transit)` (msprof-analyze's "Wait Time Ratio"); `sync_ratio` likewise
with synchronization time. Ops without a size or a group size get NaN bandwidths.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.analyses.parallel_groups import classify_comm_ops, comm_class_totals
from analyzers.context import Output
from analyzers.schema import bandwidth_gbps


def busbw_factor(op_type: str, n) -> float:
    try:
        n = int(n)
    except (TypeError, ValueError):
        return float("nan")
    if n < 1:
        return float("nan")
    t = str(op_type).lower()
    if t == "allreduce":
        return 2.0 * (n - 1) / n
    if t in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return (n - 1) / n
    if t in ("broadcast", "reduce", "send", "recv"):
        return 1.0
    return float("nan")


def steps(op_type: str, n: int) -> int:
    """Sequential hops of the ring algorithm: the number of latency terms one collective pays."""
    if n <= 1:
        return 0
    t = op_type.lower()
    if t == "allreduce":
        return 2 * (n - 1)
    if t in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return n - 1
    return 1


def factor(op_type: str, n: int) -> float:
    f = busbw_factor(op_type, n)
    return 0.0 if f != f else f  # NaN (unknown op) -> bytes term ignored


def comm_op_stats(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """comm_ops with `algbw_gbps`, `busbw_gbps`, `wait_ratio`, `sync_ratio` added."""
    co = comm_ops.copy()
    if not len(co):
        for c in ("algbw_gbps", "busbw_gbps", "wait_ratio", "sync_ratio"):
            co[c] = pd.Series(dtype="float64")
        return co
    t_s = co["elapse_ms"].astype(float) / 1e3
    size = co["size_bytes"].astype(float)
    co["algbw_gbps"] = bandwidth_gbps(size / 1e9, t_s)
    factors = np.array(
        [busbw_factor(t, n) for t, n in zip(co["op_type"], co["group_size"].astype("object"))], dtype=float
    )
    co["busbw_gbps"] = co["algbw_gbps"] * factors
    wait = co["wait_ms"].astype(float)
    transit = co["transit_ms"].astype(float)
    sync = co["synchronization_ms"].astype(float)
    den = wait + transit
    computed = (wait / den).where(den > 0, 0.0).where(den.notna())
    co["wait_ratio"] = co["wait_ratio"].astype(float).fillna(computed) if "wait_ratio" in co else computed
    den2 = sync + transit
    co["sync_ratio"] = (sync / den2).where(den2 > 0, 0.0).where(den2.notna())
    return co


def bandwidth_wide(comm_bandwidth: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step, op_name) with a `<TRANSPORT>_gbps` column per transport."""
    if comm_bandwidth is None or not len(comm_bandwidth):
        return pd.DataFrame(columns=["rank", "step", "op_name"])
    w = comm_bandwidth.pivot_table(
        index=["rank", "step", "op_name"], columns="transport", values="bandwidth_gbps", aggfunc="first"
    )
    w.columns = [f"{c}_gbps" for c in w.columns]
    return w.reset_index()


def per_type_summary(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Per op type: count, total and mean elapse, mean wait ratio, mean busbw."""
    if not len(comm_ops):
        return pd.DataFrame(
            columns=["op_type", "count", "elapse_ms_total", "elapse_ms_mean", "wait_ratio_mean", "busbw_gbps_mean"]
        )
    return (
        comm_ops.groupby("op_type")
        .agg(
            count=("op_name", "size"),
            elapse_ms_total=("elapse_ms", "sum"),
            elapse_ms_mean=("elapse_ms", "mean"),
            wait_ratio_mean=("wait_ratio", "mean"),
            busbw_gbps_mean=("busbw_gbps", "mean"),
        )
        .reset_index()
        .sort_values("elapse_ms_total", ascending=False)
    )


def rank_totals(comm_ops: pd.DataFrame, comm_bandwidth: pd.DataFrame) -> pd.DataFrame:
    """Per (group, rank, step): summed times of all its collectives, wait/sync ratios of the sums, and per
    transport the summed transit size/time and bandwidth = size / time (MB/ms = GB/s). This is
    msprof-analyze's "Total Op Info" entry of cluster_communication.json."""
    cols = [
        "group",
        "rank",
        "step",
        "ops",
        "elapse_ms",
        "transit_ms",
        "wait_ms",
        "synchronization_ms",
        "idle_ms",
        "wait_ratio",
        "sync_ratio",
    ]
    if comm_ops is None or not len(comm_ops):
        return pd.DataFrame(columns=cols)
    co = comm_ops.copy()
    co["group"] = co["group"].fillna("").astype(str)
    keys = ["group", "rank", "step"]
    t = (
        co.groupby(keys, dropna=False)
        .agg(
            ops=("op_name", "size"),
            elapse_ms=("elapse_ms", "sum"),
            transit_ms=("transit_ms", "sum"),
            wait_ms=("wait_ms", "sum"),
            synchronization_ms=("synchronization_ms", "sum"),
            idle_ms=("idle_ms", "sum"),
        )
        .reset_index()
    )
    den = t["wait_ms"] + t["transit_ms"]
    t["wait_ratio"] = (t["wait_ms"] / den).where(den > 0, 0.0)
    den = t["synchronization_ms"] + t["transit_ms"]
    t["sync_ratio"] = (t["synchronization_ms"] / den).where(den > 0, 0.0)
    if comm_bandwidth is not None and len(comm_bandwidth):
        bw = comm_bandwidth.copy()
        if "group" not in bw.columns:
            bw = bw.merge(co[["rank", "step", "op_name", "group"]], on=["rank", "step", "op_name"], how="left")
        bw["group"] = bw["group"].fillna("").astype(str)
        agg = bw.groupby(keys + ["transport"], dropna=False).agg(size_mb=("size_mb", "sum"), time_ms=("time_ms", "sum"))
        agg["bandwidth_gbps"] = bandwidth_gbps(agg["size_mb"], agg["time_ms"])
        wide = agg.unstack("transport")
        wide.columns = [f"{tr}_{m}" for m, tr in wide.columns]
        t = t.merge(wide.reset_index(), on=keys, how="left")
    return t


def analysis(ctx):
    """Registry entry `collectives`: per-op statistics with bandwidths and traffic class
    (`parallel_groups.classify_comm_ops`), per type, per rank, per class."""

    co = comm_op_stats(ctx.table("comm_ops"))
    meta = (ctx.profile.meta or {}) if ctx.profile is not None else {}
    co["comm_class"] = pd.Series(
        classify_comm_ops(co, meta.get("parallel_groups"), ctx.table("spans"), meta.get("comm_size_classes")).to_numpy()
        if len(co)
        else [],
        index=co.index,
        dtype=object,
    )
    bw = ctx.table("comm_bandwidth")
    wait = pd.to_numeric(co["wait_ratio"], errors="coerce").dropna() if "wait_ratio" in co.columns else []
    return Output(
        tables={
            "comm_ops": co,
            "comm_types": per_type_summary(co) if len(co) else None,
            "comm_rank_totals": rank_totals(co, bw) if len(co) else None,
            "comm_classes": comm_class_totals(co) if len(co) else None,
        },
        metrics={"comm_wait_ratio": float(wait.mean()) if len(wait) else None},
    )
