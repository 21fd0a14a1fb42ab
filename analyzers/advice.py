"""Rule-based tuning advice over the analysis tables.

`advise(tables, summary)` runs every rule in `RULES` and returns one row per finding with columns
`rule, severity, message, evidence`. `evidence` names the table and the rows/values the finding
rests on (e.g. ``comm_ops[rank=3]: wait 12.1 ms / (wait+transit) 30.2 ms = 0.40``), so a reader can
check it. Severity is ``high`` | ``medium`` | ``low``. A rule whose input table is missing or empty
says nothing. The thresholds are the module constants below (documented in docs/analyzers.md).
"""

from __future__ import annotations

import math

import pandas as pd

# ---- thresholds ---------------------------------------------------------------------------

#: wait / (wait + transit) of a rank's collectives above this: ranks wait for each other
WAIT_RATIO = 0.2
#: ... above this it is high severity (if the wait is also >= WAIT_STEP_SHARE_HIGH of the step time)
WAIT_RATIO_HIGH = 0.5
#: waits shorter than this per step (ms) are not worth a finding, whatever the ratio
WAIT_MIN_MS_PER_STEP = 1.0
#: share of the step time the wait must reach for high severity (when the step time is known)
WAIT_STEP_SHARE_HIGH = 0.05
#: a collective moving less than this many bytes is a "small packet" (msprof-analyze: RDMA 1 MB)
SMALL_PACKET_BYTES = 1 << 20
#: SDMA/HCCS small-packet limit (msprof-analyze packet rule: 16 MB)
SMALL_PACKET_BYTES_SDMA = 16 << 20
#: advise fusion when at least this share of collectives (and of their time) is small packets ...
SMALL_PACKET_SHARE = 0.2
#: ... and there are at least this many collectives per step
SMALL_PACKET_MIN_PER_STEP = 8
#: reference bandwidth per transport, GB/s (Ascend 910: HCCS/SDMA 18 as msprof-analyze's
#: sdma_baseline, RDMA 100 GbE = 12.5, PCIe 4.0 x16 practical ~20). CPU MCCL has no reference.
REFERENCE_BANDWIDTH_GBPS = {"HCCS": 18.0, "SDMA": 18.0, "RDMA": 12.5, "PCIE": 20.0, "SIO": 18.0}
#: measured bandwidth below this share of the reference is "far under the link's reference"
BANDWIDTH_REFERENCE_RATIO = 0.5
#: only transfers at least this large (MB) are judged against the reference (small ones are latency bound)
BANDWIDTH_MIN_MB = 1.0
#: not-overlapped communication above this share of the step
EXPOSED_COMM_SHARE = 0.2
#: free (idle, no op running) time above this share of the step: host/data-loading bound
FREE_SHARE = 0.1
#: pipeline bubble above the ideal (S-1)/(M+S-1) by more than this (absolute fraction)
BUBBLE_EXCESS = 0.1
#: pipeline bubble fraction above this with the ideal unknown
BUBBLE_FRACTION = 0.3
#: expert load: max/mean above this, or coefficient of variation above EXPERT_CV
EXPERT_MAX_MEAN = 1.5
EXPERT_CV = 0.3
#: dropped tokens above this share of routed tokens
DROPPED_FRACTION = 0.01
#: step time of one rank more than this much above the median rank (workload steps)
STEP_TIME_SPREAD = 0.1

ADVICE_COLUMNS = ["rule", "severity", "message", "evidence"]


def _t(tables: dict, name: str) -> pd.DataFrame | None:
    df = (tables or {}).get(name)
    if df is None or not isinstance(df, pd.DataFrame) or df.empty:
        return None
    return df


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series([math.nan] * len(df), index=df.index, dtype=float)
    return pd.to_numeric(df[col], errors="coerce")


def _fmt(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


# ---- rules: each takes (tables, summary) and returns a list of dict rows -------------------------


def rule_wait_ratio(tables, summary):
    co = _t(tables, "comm_ops")
    if co is None or "rank" not in co.columns:
        return []
    df = pd.DataFrame({"rank": co["rank"], "wait": _num(co, "wait_ms"), "transit": _num(co, "transit_ms")})
    if "op_type" in co.columns:
        # pipeline send/recv waits are the pipeline bubble (rule pipeline_bubble), not peers being late
        df = df[~co["op_type"].astype(str).str.lower().isin(["send", "recv"])]
    df = df.dropna()
    if df.empty:
        return []
    if "step" in co.columns:
        df["step"] = co.loc[df.index, "step"]
        nsteps = df.groupby("rank")["step"].nunique().clip(lower=1)
    else:
        nsteps = df.groupby("rank")["wait"].size().clip(upper=1)
    per = df.groupby("rank")[["wait", "transit"]].sum()
    per["ratio"] = per["wait"] / (per["wait"] + per["transit"])
    per["wait_per_step"] = per["wait"] / nsteps
    step_ms = summary.get("step_time_s") * 1000.0 if isinstance(summary.get("step_time_s"), (int, float)) else None
    out = []
    hit = per[(per["ratio"] > WAIT_RATIO) & (per["wait_per_step"] >= WAIT_MIN_MS_PER_STEP)]
    for rank, r in hit.sort_values("ratio", ascending=False).iterrows():
        big = step_ms is None or r["wait_per_step"] >= WAIT_STEP_SHARE_HIGH * step_ms
        out.append(
            {
                "rule": "wait_ratio",
                "severity": "high" if r["ratio"] > WAIT_RATIO_HIGH and big else "medium",
                "message": (
                    f"Rank {rank} spends {r['ratio']:.0%} of its collective time waiting for peers "
                    f"(> {WAIT_RATIO:.0%}): look for a slow rank, load imbalance or unsynchronized start."
                ),
                "evidence": (
                    f"comm_ops[rank={rank}, op_type not send/recv]: wait {_fmt(r['wait'])} ms / (wait+transit) "
                    f"{_fmt(r['wait'] + r['transit'])} ms = {_fmt(r['ratio'])}; {_fmt(r['wait_per_step'])} ms wait per step"
                ),
            }
        )
    return out


def rule_slow_rank(tables, summary):
    sr = _t(tables, "slow_ranks")
    if sr is None or "slow" not in sr.columns:
        return []
    hit = sr[sr["slow"].astype(bool) & (sr.get("scope", "group") == "group")]
    out = []
    for _, r in hit.iterrows():
        out.append(
            {
                "rule": "slow_rank",
                "severity": "high",
                "message": (
                    f"Rank {r['rank']} is the rank the others wait for in group '{r['group']}' "
                    f"(mean {_fmt(r['mean_lateness_ms'])} ms late per collective). Check its input "
                    f"pipeline, host load, and compute imbalance."
                ),
                "evidence": (
                    f"slow_ranks[group={r['group']}, rank={r['rank']}]: {r['test']} statistic "
                    f"{_fmt(r['statistic'], 3)} > {_fmt(r['critical'], 3)}, last in {r['last_arrivals']}/{r['n_ops']} ops"
                ),
            }
        )
    return out


def rule_slow_link(tables, summary):
    sl = _t(tables, "slow_links")
    if sl is None or "slow" not in sl.columns:
        return []
    out = []
    for _, r in sl[sl["slow"].astype(bool)].iterrows():
        where = f"link {r['src']}->{r['dst']}" if r["kind"] == "link" else f"rank {r['src']}"
        out.append(
            {
                "rule": "slow_link",
                "severity": "high" if r["ratio"] < 0.3 else "medium",
                "message": (
                    f"{r['transport']} {where} reaches {_fmt(r['bandwidth_gbps'])} GB/s, "
                    f"{r['ratio']:.0%} of the group average {_fmt(r['group_mean_gbps'])} GB/s: check that link/NIC."
                ),
                "evidence": (
                    f"slow_links[kind={r['kind']}, group={r['group']}, transport={r['transport']}, "
                    f"src={r['src']}, dst={r['dst']}]: {_fmt(r['size_mb'])} MB in {_fmt(r['time_ms'])} ms"
                ),
            }
        )
    return out


def rule_small_packets(tables, summary):
    co = _t(tables, "comm_ops")
    if co is None:
        return []
    size = _num(co, "size_bytes")
    el = _num(co, "elapse_ms")
    ok = size.notna()
    if ok.sum() == 0:
        return []
    small = ok & (size < SMALL_PACKET_BYTES)
    share = small.sum() / ok.sum()
    time_share = el[small].sum() / el[ok].sum() if el[ok].sum() > 0 else share
    steps = max(int(pd.to_numeric(co.get("step"), errors="coerce").nunique()) if "step" in co.columns else 1, 1)
    ranks = max(int(co["rank"].nunique()) if "rank" in co.columns else 1, 1)
    per_step = ok.sum() / steps / ranks
    if share < SMALL_PACKET_SHARE or time_share < SMALL_PACKET_SHARE or per_step < SMALL_PACKET_MIN_PER_STEP:
        return []
    return [
        {
            "rule": "small_packets",
            "severity": "medium" if share < 0.5 else "high",
            "message": (
                f"{share:.0%} of collectives ({time_share:.0%} of their time) move less than "
                f"{SMALL_PACKET_BYTES >> 20} MiB, {per_step:.0f} collectives per step per rank: fuse gradients "
                f"into larger buckets (comm_fusion) or raise the batch size."
            ),
            "evidence": (
                f"comm_ops: {int(small.sum())}/{int(ok.sum())} ops with size_bytes < {SMALL_PACKET_BYTES}, "
                f"median size {size[ok].median():.0f} B"
            ),
        }
    ]


def rule_bandwidth_reference(tables, summary):
    cb = _t(tables, "comm_bandwidth")
    if cb is None or "transport" not in cb.columns:
        return []
    df = pd.DataFrame(
        {
            "rank": cb.get("rank"),
            "transport": cb["transport"].astype(str).str.upper(),
            "size_mb": _num(cb, "size_mb"),
            "time_ms": _num(cb, "time_ms"),
        }
    ).dropna(subset=["size_mb", "time_ms"])
    df = df[df["transport"].isin(REFERENCE_BANDWIDTH_GBPS) & (df["size_mb"] >= BANDWIDTH_MIN_MB)]
    if df.empty:
        return []
    per = df.groupby(["transport", "rank"])[["size_mb", "time_ms"]].sum()
    per = per[per["time_ms"] > 0]
    per["bw"] = per["size_mb"] / per["time_ms"]
    out = []
    for (tr, rank), r in per.iterrows():
        ref = REFERENCE_BANDWIDTH_GBPS[tr]
        if r["bw"] < BANDWIDTH_REFERENCE_RATIO * ref:
            out.append(
                {
                    "rule": "bandwidth_reference",
                    "severity": "medium",
                    "message": (
                        f"Rank {rank} {tr} bandwidth {_fmt(r['bw'])} GB/s is under "
                        f"{BANDWIDTH_REFERENCE_RATIO:.0%} of the {tr} reference {ref} GB/s for transfers >= "
                        f"{BANDWIDTH_MIN_MB} MB: check link health, contention with compute (SDMA), or packet sizes."
                    ),
                    "evidence": (
                        f"comm_bandwidth[rank={rank}, transport={tr}, size_mb>={BANDWIDTH_MIN_MB}]: "
                        f"{_fmt(r['size_mb'])} MB in {_fmt(r['time_ms'])} ms"
                    ),
                }
            )
    return out


def _breakdown_share(tables, col):
    sb = _t(tables, "step_breakdown")
    if sb is None or "step_us" not in sb.columns or col not in sb.columns:
        return None
    if not _num(sb, "computing_us").sum() > 0:
        return None  # no compute ops were profiled: the breakdown says nothing about idle or exposed time
    step = _num(sb, "step_us").sum()
    if not step > 0:
        return None
    return float(_num(sb, col).sum() / step), sb


def rule_exposed_comm(tables, summary):
    r = _breakdown_share(tables, "communication_not_overlapped_us")
    if r is None:
        return []
    share, sb = r
    if share <= EXPOSED_COMM_SHARE:
        return []
    return [
        {
            "rule": "exposed_communication",
            "severity": "high" if share > 2 * EXPOSED_COMM_SHARE else "medium",
            "message": (
                f"{share:.0%} of step time is communication not hidden behind compute (> {EXPOSED_COMM_SHARE:.0%}): "
                f"overlap gradient all-reduce with backward, fuse/bucket gradients, compress gradients, or use "
                f"fewer, larger collectives."
            ),
            "evidence": (
                f"step_breakdown: sum communication_not_overlapped_us "
                f"{_num(sb, 'communication_not_overlapped_us').sum():.0f} / sum step_us {_num(sb, 'step_us').sum():.0f}"
            ),
        }
    ]


def rule_free_time(tables, summary):
    r = _breakdown_share(tables, "free_us")
    if r is None:
        return []
    share, sb = r
    if share <= FREE_SHARE:
        return []
    return [
        {
            "rule": "free_time",
            "severity": "medium",
            "message": (
                f"{share:.0%} of step time nothing runs on the device (> {FREE_SHARE:.0%}): the host is the "
                f"bottleneck (data loading, Python overhead, op dispatch); try graph mode, data prefetch, more workers."
            ),
            "evidence": (
                f"step_breakdown: sum free_us {_num(sb, 'free_us').sum():.0f} / sum step_us {_num(sb, 'step_us').sum():.0f}"
            ),
        }
    ]


def rule_pipeline_bubble(tables, summary):
    pl = _t(tables, "pipeline")
    if pl is None or "bubble_fraction" not in pl.columns:
        return []
    out = []
    # median over steps: the first profiled step often carries compile/warm-up waits
    per = pl.groupby("stage").agg(
        frac=("bubble_fraction", "median"), ideal=("ideal_fraction", "mean"), n=("bubble_fraction", "size")
    )
    for stage, r in per.iterrows():
        excess = r["frac"] - r["ideal"] if pd.notna(r["ideal"]) else math.nan
        bad = excess > BUBBLE_EXCESS if pd.notna(excess) else r["frac"] > BUBBLE_FRACTION
        if not bad:
            continue
        ideal_txt = f"ideal {r['ideal']:.0%}" if pd.notna(r["ideal"]) else "ideal unknown"
        out.append(
            {
                "rule": "pipeline_bubble",
                "severity": "medium",
                "message": (
                    f"Pipeline stage {stage} is idle {r['frac']:.0%} of the pipeline window ({ideal_txt}): "
                    f"more micro-batches, balance layers across stages, or an interleaved/1F1B schedule."
                ),
                "evidence": f"pipeline[stage={stage}]: median bubble_fraction {_fmt(r['frac'], 3)} over {int(r['n'])} steps",
            }
        )
    return out


def rule_expert_balance(tables, summary):
    ex = _t(tables, "experts")
    if ex is None:
        return []
    mm = _num(ex, "max_mean_ratio").mean()
    cv = _num(ex, "cv").mean()
    dropped = _num(ex, "dropped_fraction").mean()
    out = []
    if (pd.notna(mm) and mm > EXPERT_MAX_MEAN) or (pd.notna(cv) and cv > EXPERT_CV):
        out.append(
            {
                "rule": "expert_imbalance",
                "severity": "high" if pd.notna(mm) and mm > 2 * EXPERT_MAX_MEAN else "medium",
                "message": (
                    f"Expert load is unbalanced (max/mean {_fmt(mm)}, CV {_fmt(cv)}): raise the auxiliary "
                    f"load-balancing loss coefficient or the capacity factor."
                ),
                "evidence": f"experts: mean max_mean_ratio {_fmt(mm, 3)}, mean cv {_fmt(cv, 3)} over {len(ex)} steps",
            }
        )
    if pd.notna(dropped) and dropped > DROPPED_FRACTION:
        out.append(
            {
                "rule": "dropped_tokens",
                "severity": "medium",
                "message": f"{dropped:.1%} of routed tokens are dropped by the expert capacity limit: raise capacity_factor.",
                "evidence": f"experts: mean dropped_fraction {_fmt(dropped, 4)} over {len(ex)} steps",
            }
        )
    return out


def rule_step_spread(tables, summary):
    ws = _t(tables, "workload_steps")
    if ws is None or "rank" not in ws.columns or "step_time_s" not in ws.columns or ws["rank"].nunique() < 2:
        return []
    per = ws.groupby("rank")["step_time_s"].median()
    med = per.median()
    if not med > 0:
        return []
    out = []
    for rank, v in per.items():
        if v > (1 + STEP_TIME_SPREAD) * med:
            out.append(
                {
                    "rule": "step_time_spread",
                    "severity": "medium",
                    "message": f"Rank {rank}'s median step time {v:.4f} s is {v / med - 1:.0%} above the ranks' median {med:.4f} s.",
                    "evidence": f"workload_steps[rank={rank}]: median step_time_s {v:.4f}",
                }
            )
    return out


RULES = [
    rule_slow_rank,
    rule_wait_ratio,
    rule_slow_link,
    rule_bandwidth_reference,
    rule_small_packets,
    rule_exposed_comm,
    rule_free_time,
    rule_pipeline_bubble,
    rule_expert_balance,
    rule_step_spread,
]

_ORDER = {"high": 0, "medium": 1, "low": 2}


def advise(tables: dict[str, pd.DataFrame], summary: dict) -> pd.DataFrame:
    """Run every rule; one row per finding (rule, severity, message, evidence), most severe first."""
    rows: list[dict] = []
    for rule in RULES:
        rows += rule(tables or {}, summary or {})
    df = pd.DataFrame(rows, columns=ADVICE_COLUMNS)
    if df.empty:
        return df
    df["_o"] = df["severity"].map(_ORDER)
    return df.sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)


def analysis(ctx):
    """Registry entry `advice` (runs last: reads every table and metric before it)."""
    from analyzers.registry import Output

    return Output(tables={"advice": advise(dict(ctx.tables, workload_steps=ctx.table("workload_steps")), ctx.metrics)})
