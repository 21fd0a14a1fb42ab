"""Slow ranks and slow links.

Slow rank = the rank the others wait for. In a collective every rank waits until the last one
arrives, so for one collective instance (same group, step, op name and occurrence) the *lateness*
of rank r is

    lateness_r = wait_max - wait_r          (ms; wait_ms from the profiler)

which equals "arrival_r - first arrival". Without `wait_ms` the arrival time `start_us` is used
(only meaningful when ranks share a clock, e.g. one host). Per rank the mean lateness over the
group's collectives is then tested for a single high outlier among the group's ranks:

* 3 <= n <= 10 ranks: Dixon's Q test, Q = (x_max - x_second) / (x_max - x_min) > Q95(n)
  (Rorabacher 1991, 95 % confidence);
* n > 10 ranks: 3-sigma, (x_max - mean(others)) / std(others) > 3 (leave-one-out, so the
  outlier does not inflate the spread it is measured against);
* n == 2: no statistical test exists; the rank is reported slow when it arrived last in at least
  `PAIR_LAST_SHARE` of the collectives.

In every case the lateness must also matter in practice: mean lateness >= `MIN_LATENESS_SHARE`
of the mean collective duration (elapse_ms), or >= `MIN_LATENESS_MS` when durations are unknown.

Slow link = a src->dst link (or a rank's transport, from comm_bandwidth) whose bandwidth
(total size / total time over its transfers of at least `MIN_TRANSFER_MB`) is below
`SLOW_LINK_RATIO` x the average bandwidth of the same transport in the same group. Links that moved
less than `MIN_LINK_MB` in total or use the LOCAL transport are ignored (their bandwidth is noise).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: Dixon Q critical values at 95 % confidence, n = 3..10 (Rorabacher, Anal. Chem. 1991)
DIXON_Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}
#: largest group tested with Dixon's Q; bigger groups use the 3-sigma rule
DIXON_MAX_N = 10
#: sigma threshold for large groups
SIGMA_THRESHOLD = 3.0
#: two-rank groups: share of collectives the slow rank must arrive last in
PAIR_LAST_SHARE = 0.75
#: the slow rank's mean lateness must be at least this share of the mean collective time ...
MIN_LATENESS_SHARE = 0.10
#: ... or at least this many ms when collective durations are unknown
MIN_LATENESS_MS = 0.01
#: a link is slow when its bandwidth is below this ratio of its group's average (same transport)
SLOW_LINK_RATIO = 0.6
#: links moving less than this (MB, over the whole profile) are ignored
MIN_LINK_MB = 1.0
#: only transfers of at least this size (MB, one op on one link) count towards a link's bandwidth:
#: smaller ones are latency bound and would make a link that carries small messages look slow
MIN_TRANSFER_MB = 1.0
#: transports that are not links between devices
IGNORED_TRANSPORTS = ("LOCAL", "INVALID_TYPE", "")

SLOW_RANK_COLUMNS = [
    "group",
    "scope",  # "group" (all collectives of the group) or "collective" (one op name over steps)
    "op_name",  # "" for scope == "group"
    "rank",
    "group_size",
    "n_ops",
    "last_arrivals",  # collectives in which this rank arrived last
    "mean_lateness_ms",
    "total_lateness_ms",
    "mean_elapse_ms",
    "test",  # dixon_q | 3sigma | pair | none
    "statistic",
    "critical",
    "slow",
]

SLOW_LINK_COLUMNS = [
    "kind",  # "link" (src->dst, from links) or "rank" (rank x transport, from comm_bandwidth)
    "group",
    "transport",
    "src",
    "dst",  # = src for kind == "rank"
    "size_mb",
    "time_ms",
    "bandwidth_gbps",
    "group_mean_gbps",
    "ratio",
    "slow",
]


def _empty(cols):
    return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})


def _col(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    if name in df.columns:
        return df[name]
    return pd.Series([default] * len(df), index=df.index)


def _lateness(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """One row per rank and collective instance with `lateness_ms` and `last` (arrived last)."""
    df = pd.DataFrame(
        {
            "rank": pd.to_numeric(_col(comm_ops, "rank"), errors="coerce"),
            "step": pd.to_numeric(_col(comm_ops, "step"), errors="coerce").fillna(-1),
            "op_name": _col(comm_ops, "op_name", "").fillna("").astype(str),
            "group": _col(comm_ops, "group", "").fillna("").astype(str),
            "wait_ms": pd.to_numeric(_col(comm_ops, "wait_ms"), errors="coerce"),
            "start_us": pd.to_numeric(_col(comm_ops, "start_us"), errors="coerce"),
            "elapse_ms": pd.to_numeric(_col(comm_ops, "elapse_ms"), errors="coerce"),
        }
    )
    df = df.dropna(subset=["rank"])
    if df.empty:
        return df
    df["rank"] = df["rank"].astype("int64")
    df = df.sort_values(["group", "rank", "step", "op_name", "start_us"], kind="stable")
    # k-th occurrence of the same op name in the same step on the same rank
    df["occ"] = df.groupby(["group", "rank", "step", "op_name"]).cumcount()
    key = ["group", "step", "op_name", "occ"]
    if df["wait_ms"].notna().any():
        wmax = df.groupby(key)["wait_ms"].transform("max")
        df["lateness_ms"] = wmax - df["wait_ms"]
    else:
        smin = df.groupby(key)["start_us"].transform("min")
        df["lateness_ms"] = (df["start_us"] - smin) / 1000.0
    df = df.dropna(subset=["lateness_ms"])
    # only instances every member of the group took part in (and at least 2 ranks)
    nranks_group = df.groupby("group")["rank"].transform("nunique")
    ninst = df.groupby(key)["rank"].transform("nunique")
    df = df[(ninst == nranks_group) & (ninst >= 2)].copy()
    lmax = df.groupby(key)["lateness_ms"].transform("max")
    # ties (all equal) give nobody a "last" arrival
    lmin = df.groupby(key)["lateness_ms"].transform("min")
    df["last"] = (df["lateness_ms"] == lmax) & (lmax > lmin)
    return df


def _outlier_test(values: pd.Series) -> tuple[str, float, float, bool]:
    """Test the largest value for being a high outlier. Returns (test, statistic, critical, is_outlier)."""
    x = np.sort(values.to_numpy(dtype=float))
    n = len(x)
    if n < 3:
        return "pair" if n == 2 else "none", math.nan, math.nan, False
    if n <= DIXON_MAX_N:
        rng = x[-1] - x[0]
        if rng <= 0:
            return "dixon_q", 0.0, DIXON_Q95[n], False
        q = (x[-1] - x[-2]) / rng
        return "dixon_q", float(q), DIXON_Q95[n], bool(q > DIXON_Q95[n])
    others = x[:-1]
    mu, sd = others.mean(), others.std(ddof=1)
    if sd <= 0:
        z = math.inf if x[-1] > mu else 0.0
    else:
        z = (x[-1] - mu) / sd
    return "3sigma", float(z), SIGMA_THRESHOLD, bool(z > SIGMA_THRESHOLD)


def _judge(rows: pd.DataFrame, scope: str, group: str, op_name: str) -> list[dict]:
    """rows: one row per (rank, instance) of one group/scope."""
    per = rows.groupby("rank").agg(
        n_ops=("lateness_ms", "size"),
        last_arrivals=("last", "sum"),
        mean_lateness_ms=("lateness_ms", "mean"),
        total_lateness_ms=("lateness_ms", "sum"),
        mean_elapse_ms=("elapse_ms", "mean"),
    )
    n = len(per)
    test, stat, crit, outlier = _outlier_test(per["mean_lateness_ms"])
    top = per["mean_lateness_ms"].idxmax() if n else None
    group_elapse = rows["elapse_ms"].mean()
    out = []
    for rank, r in per.iterrows():
        is_top = rank == top
        slow = False
        if is_top:
            if test == "pair":
                share = r["last_arrivals"] / max(r["n_ops"], 1)
                stat, crit, outlier = float(share), PAIR_LAST_SHARE, bool(share >= PAIR_LAST_SHARE)
            floor = (
                MIN_LATENESS_SHARE * group_elapse if pd.notna(group_elapse) and group_elapse > 0 else MIN_LATENESS_MS
            )
            slow = bool(outlier and r["mean_lateness_ms"] >= floor)
        out.append(
            {
                "group": group,
                "scope": scope,
                "op_name": op_name,
                "rank": int(rank),
                "group_size": n,
                "n_ops": int(r["n_ops"]),
                "last_arrivals": int(r["last_arrivals"]),
                "mean_lateness_ms": float(r["mean_lateness_ms"]),
                "total_lateness_ms": float(r["total_lateness_ms"]),
                "mean_elapse_ms": float(r["mean_elapse_ms"]) if pd.notna(r["mean_elapse_ms"]) else math.nan,
                "test": test,
                "statistic": stat if is_top else math.nan,
                "critical": crit if is_top else math.nan,
                "slow": slow,
            }
        )
    return out


def find_slow_ranks(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Per communication group, and per collective (op name) inside it: every rank's lateness and
    whether it is *the* slow rank the others wait for (column `slow`). See the module docstring."""
    if comm_ops is None or len(comm_ops) == 0:
        return _empty(SLOW_RANK_COLUMNS)
    df = _lateness(comm_ops)
    if df.empty:
        return _empty(SLOW_RANK_COLUMNS)
    out: list[dict] = []
    for group, g in df.groupby("group", sort=True):
        out += _judge(g, "group", group, "")
        if g["op_name"].nunique() > 1:
            for op, o in g.groupby("op_name", sort=True):
                out += _judge(o, "collective", group, op)
    res = pd.DataFrame(out, columns=SLOW_RANK_COLUMNS)
    res["slow"] = res["slow"].astype(bool)
    return res.reset_index(drop=True)


def _link_rows(links: pd.DataFrame) -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "group": _col(links, "group", "").fillna("").astype(str),
            "transport": _col(links, "transport", "").fillna("").astype(str).str.upper(),
            "src": pd.to_numeric(_col(links, "src"), errors="coerce"),
            "dst": pd.to_numeric(_col(links, "dst"), errors="coerce"),
            "size_mb": pd.to_numeric(_col(links, "size_mb"), errors="coerce"),
            "time_ms": pd.to_numeric(_col(links, "time_ms"), errors="coerce"),
        }
    )
    return df


def _judge_bandwidth(df: pd.DataFrame, keys: list[str], kind: str) -> pd.DataFrame:
    df = df[~df["transport"].isin(IGNORED_TRANSPORTS)].dropna(subset=["size_mb", "time_ms"])
    df = df[df["size_mb"] >= MIN_TRANSFER_MB]
    if df.empty:
        return _empty(SLOW_LINK_COLUMNS)
    agg = df.groupby(["group", "transport"] + keys, dropna=False)[["size_mb", "time_ms"]].sum().reset_index()
    agg = agg[(agg["size_mb"] >= MIN_LINK_MB) & (agg["time_ms"] > 0)].copy()
    if agg.empty:
        return _empty(SLOW_LINK_COLUMNS)
    # GB/s = MB/ms
    agg["bandwidth_gbps"] = agg["size_mb"] / agg["time_ms"]
    agg["group_mean_gbps"] = agg.groupby(["group", "transport"])["bandwidth_gbps"].transform("mean")
    agg["n_in_group"] = agg.groupby(["group", "transport"])["bandwidth_gbps"].transform("size")
    agg["ratio"] = agg["bandwidth_gbps"] / agg["group_mean_gbps"]
    agg["slow"] = (agg["ratio"] < SLOW_LINK_RATIO) & (agg["n_in_group"] >= 2)
    agg["kind"] = kind
    if kind == "rank":
        agg["src"] = agg["rank"]
        agg["dst"] = agg["rank"]
    agg["src"] = agg["src"].astype("int64")
    agg["dst"] = agg["dst"].astype("int64")
    return agg[SLOW_LINK_COLUMNS]


def find_slow_links(links: pd.DataFrame, comm_bandwidth: pd.DataFrame) -> pd.DataFrame:
    """Links (src->dst per transport, from `links`) and ranks' transports (from `comm_bandwidth`)
    with their total size, time and bandwidth, the group average for the same transport, the ratio
    and `slow` (ratio < SLOW_LINK_RATIO). Bandwidth is recomputed as total size / total time."""
    parts = []
    if links is not None and len(links):
        lr = _link_rows(links).dropna(subset=["src", "dst"])
        lr = lr[lr["src"] != lr["dst"]]
        parts.append(_judge_bandwidth(lr, ["src", "dst"], "link"))
    if comm_bandwidth is not None and len(comm_bandwidth):
        cb = comm_bandwidth
        br = pd.DataFrame(
            {
                "rank": pd.to_numeric(_col(cb, "rank"), errors="coerce"),
                "transport": _col(cb, "transport", "").fillna("").astype(str).str.upper(),
                "size_mb": pd.to_numeric(_col(cb, "size_mb"), errors="coerce"),
                "time_ms": pd.to_numeric(_col(cb, "time_ms"), errors="coerce"),
            }
        )
        br["group"] = _col(cb, "group", "").fillna("").astype(str)
        br = br.dropna(subset=["rank"])
        parts.append(_judge_bandwidth(br, ["rank"], "rank"))
    parts = [p for p in parts if len(p)]
    if not parts:
        return _empty(SLOW_LINK_COLUMNS)
    res = pd.concat(parts, ignore_index=True)
    res["slow"] = res["slow"].astype(bool)
    return res
