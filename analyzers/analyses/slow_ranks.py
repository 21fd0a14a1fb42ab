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
* n == 2: no outlier test exists; the rank is reported slow when it arrived last in at least
  `PAIR_LAST_SHARE` of the collectives and a one-sided sign test rejects a fair coin
  (P[X >= last | n, 1/2] < `PAIR_ALPHA`; e.g. 5 of 5, 7 of 8, 9 of 10).

In every case the lateness must also matter in practice: the top rank's mean lateness minus the
median of the other ranks' must be >= `MIN_LATENESS_SHARE` of the mean collective duration
(elapse_ms), or >= `MIN_LATENESS_MS` when durations are unknown. (Comparing with the median, not
zero, keeps the random last arrival of a healthy group from counting: a 95 % test over many groups
would otherwise flag one group in twenty.)

Slow link = a src->dst link (or a rank's transport, from comm_bandwidth) whose bandwidth
(total size / total time over its transfers of at least `MIN_TRANSFER_MB`) is below
`SLOW_LINK_RATIO` x the average bandwidth of the same transport in the same group. Links that moved
less than `MIN_LINK_MB` in total or use the LOCAL transport are ignored (their bandwidth is noise).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.context import Output
from analyzers.schema import bandwidth_gbps

#: Dixon Q critical values at 95 % confidence, n = 3..10 (Rorabacher, Anal. Chem. 1991)
DIXON_Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}
#: largest group tested with Dixon's Q; bigger groups use the 3-sigma rule
DIXON_MAX_N = 10
#: sigma threshold for large groups
SIGMA_THRESHOLD = 3.0
#: two-rank groups: share of collectives the slow rank must arrive last in ...
PAIR_LAST_SHARE = 0.75
#: ... and a one-sided sign test (binomial, p = 1/2) must reject "random last arrival" at this level
PAIR_ALPHA = 0.05
#: ... or, by time instead of count (group scope only: a collective's instances are its steps, too few for a time
#: share to mean anything), the rank carries at least this share of the pair's summed lateness: a straggler late
#: by a lot at a few collectives (host work before its step: the other rank waits at its first collective of every
#: step and nowhere else) arrives last in only ~half of all collectives, but nearly all waiting is for it
PAIR_LATENESS_SHARE = 0.9
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
    "ranks_compared",  # profiled ranks of the group that took part (the group may be larger)
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
    # names -> sorted integer codes once (grouping on strings dominates the run time at scale)
    gcode, gnames = pd.factorize(df["group"], sort=True)
    ocode, onames = pd.factorize(df["op_name"], sort=True)
    df["group"], df["op_name"] = gcode, ocode
    df = df.sort_values(["group", "rank", "step", "op_name", "start_us"], kind="stable")
    # k-th occurrence of the same op name in the same step on the same rank
    df["occ"] = df.groupby(["group", "rank", "step", "op_name"]).cumcount()
    df["inst"] = df.groupby(["group", "step", "op_name", "occ"]).ngroup()
    key = "inst"
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
    return df, np.asarray(gnames, dtype=object), np.asarray(onames, dtype=object)


def _outlier_test(values: pd.Series) -> tuple[str, float, float, bool]:
    """Test the largest value for being a high outlier. Returns (test, statistic, critical, is_outlier)."""
    x = np.sort(np.asarray(values, dtype=float))
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


def sign_test_p(k: int, n: int) -> float:
    """P[X >= k] for X ~ Binomial(n, 1/2): the one-sided sign test. Exact up to n = 2000 (integer
    arithmetic), normal approximation with continuity correction beyond. (scipy.stats would do, but
    importing it costs about a second per process.)"""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if n <= 2000:
        return sum(math.comb(n, i) for i in range(k, n + 1)) / (1 << n)
    z = (k - 0.5 - n / 2.0) / math.sqrt(n / 4.0)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _judge(df: pd.DataFrame, scope: str, gnames: np.ndarray, onames: np.ndarray) -> pd.DataFrame:
    """df: one row per (rank, instance). One output row per (group[, op_name], rank)."""
    keys = ["group"] if scope == "group" else ["group", "op_name"]
    per = (
        df.groupby(keys + ["rank"], sort=True)
        .agg(
            n_ops=("lateness_ms", "size"),
            last_arrivals=("last", "sum"),
            mean_lateness_ms=("lateness_ms", "mean"),
            total_lateness_ms=("lateness_ms", "sum"),
            mean_elapse_ms=("elapse_ms", "mean"),
        )
        .reset_index()
    )
    per["scope"] = scope
    per["ranks_compared"] = per.groupby(keys)["rank"].transform("size")
    # mean collective time of the block (over instances, not over ranks)
    w = per["mean_elapse_ms"] * per["n_ops"]
    block_elapse = w.groupby([per[k] for k in keys]).transform("sum") / per["n_ops"].where(
        per["mean_elapse_ms"].notna()
    ).groupby([per[k] for k in keys]).transform("sum")
    lat = per["mean_lateness_ms"].to_numpy(dtype=float)
    tot = per["total_lateness_ms"].to_numpy(dtype=float)
    last = per["last_arrivals"].to_numpy(dtype=float)
    nops = per["n_ops"].to_numpy(dtype=float)
    bel = block_elapse.to_numpy(dtype=float)
    # one outlier test per (group[, op]) block; `per` is sorted by keys, so blocks are contiguous
    kv = per.groupby(keys, sort=True).ngroup().to_numpy()
    starts = np.flatnonzero(np.r_[True, kv[1:] != kv[:-1]])
    ends = np.r_[starts[1:], len(per)]
    test_col = np.empty(len(per), dtype=object)
    stat_col = np.full(len(per), math.nan)
    crit_col = np.full(len(per), math.nan)
    slow_col = np.zeros(len(per), dtype=bool)
    for s0, s1 in zip(starts, ends):
        vals = lat[s0:s1]
        top = s0 + int(np.argmax(vals))
        test, stat, crit, outlier = _outlier_test(vals)
        if test == "pair":
            share = last[top] / max(nops[top], 1.0)
            p_value = sign_test_p(int(last[top]), int(nops[top]))
            stat, crit = float(share), PAIR_LAST_SHARE
            outlier = bool(share >= PAIR_LAST_SHARE and p_value < PAIR_ALPHA)
            block_total = float(np.nansum(tot[s0:s1]))
            if scope == "group" and not outlier and block_total > 0 and tot[top] / block_total >= PAIR_LATENESS_SHARE:
                stat, crit, outlier = float(tot[top] / block_total), PAIR_LATENESS_SHARE, True
        el = bel[top]
        floor = MIN_LATENESS_SHARE * el if el == el and el > 0 else MIN_LATENESS_MS
        # the top rank must be late by more than the floor compared with a typical rank of the group
        others = np.delete(vals, top - s0)
        excess = vals[top - s0] - (float(np.median(others)) if len(others) else 0.0)
        test_col[s0:s1] = test
        stat_col[top], crit_col[top] = stat, crit
        slow_col[top] = bool(outlier and excess >= floor)
    per["test"] = test_col
    per["statistic"] = stat_col
    per["critical"] = crit_col
    per["slow"] = slow_col
    per["group"] = gnames[per["group"].to_numpy()]
    per["op_name"] = "" if scope == "group" else onames[per["op_name"].to_numpy()]
    return per[SLOW_RANK_COLUMNS]


def find_slow_ranks(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """Per communication group, and per collective (op name) inside it: every rank's lateness and
    whether it is *the* slow rank the others wait for (column `slow`). See the module docstring."""
    if comm_ops is None or len(comm_ops) == 0:
        return _empty(SLOW_RANK_COLUMNS)
    df = _lateness(comm_ops)
    if isinstance(df, pd.DataFrame):  # nothing usable
        return _empty(SLOW_RANK_COLUMNS)
    df, gnames, onames = df
    if df.empty:
        return _empty(SLOW_RANK_COLUMNS)
    parts = [_judge(df, "group", gnames, onames)]
    multi = df.groupby("group")["op_name"].transform("nunique") > 1
    if multi.any():
        parts.append(_judge(df[multi], "collective", gnames, onames))
    res = pd.concat(parts, ignore_index=True)
    res = res.sort_values(
        ["group", "scope", "op_name", "rank"],
        key=lambda c: c.map({"group": 0, "collective": 1}) if c.name == "scope" else c,
        kind="stable",
    )
    res["slow"] = res["slow"].astype(bool)
    res["rank"] = res["rank"].astype("int64")
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
    agg["bandwidth_gbps"] = bandwidth_gbps(agg["size_mb"], agg["time_ms"])  # GB/s = MB/ms
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


def analysis(ctx):
    """Registry entry `slow_ranks`: slow ranks per group (from the collectives) and slow links."""
    co = ctx.table("comm_ops")
    sr = find_slow_ranks(co) if co is not None else _empty(SLOW_RANK_COLUMNS)
    groups = (ctx.profile.meta or {}).get("parallel_groups") or {} if ctx.profile is not None else {}
    # the parallel group each communication group is (dp / pp / tp ...), where the profiler metadata says
    sr["group_kind"] = sr["group"].map(
        lambda g: (groups.get(str(g)) or {}).get("kind") if isinstance(groups.get(str(g)), dict) else None
    )
    return Output(
        tables={"slow_ranks": sr, "slow_links": find_slow_links(ctx.table("links"), ctx.table("comm_bandwidth"))}
    )
