"""Rule-based tuning advice over the analysis tables.

`advise(tables, summary)` runs every rule in `RULES` and returns one row per finding with columns
`rule, severity, message, evidence, ranks, stage` (`ranks`: the global ranks the finding concerns, a
list, empty when it concerns the whole run; `stage`: the pipeline stage, or None). `evidence` names the table and the
rows/values the finding
rests on (e.g. ``comm_ops[rank=3]: wait 12.1 ms / (wait+transit) 30.2 ms = 0.40``), so a reader can
check it. Severity is ``high`` | ``medium`` | ``low``. A rule whose input table is missing or empty
says nothing. The thresholds are the module constants below (documented in docs/analyzers.md).
Rules over the step breakdown leave out ranks marked `consistent = False` (their recomputation from
the kernels disagrees with the profiler's own numbers, analyzers.analyses.breakdown): no advice rests on them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from analyzers.context import Output
from analyzers.schema import ADVICE_COLUMNS, bandwidth_gbps

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

#: pipeline stages: max/min of the stages' computing time above this names the slowest stage the bottleneck
#: (perfbench's choice: 20 % more compute on one stage idles every other stage that long per micro-batch)
STAGE_IMBALANCE_RATIO = 1.2
#: ... above this it is high severity
STAGE_IMBALANCE_HIGH = 1.5
#: exposed communication counts as "pipeline waiting" when at least this share of it is p2p (send/receive)
P2P_MAJORITY = 0.5
#: cross-rank imbalance above this ratio (spread / mean step total; msprof-analyze flags > 0.05) is high severity
IMBALANCE_HIGH = 0.2
#: msprof-analyze AicpuChecker._MIN_TASK_DURATION: an AI_CPU task longer than this (us) is worth replacing
AICPU_MIN_TASK_US = 20.0


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
                "key": str(int(rank)),
                "ranks": [int(rank)],
                "gain_ms": float(r["wait_per_step"]),
                "explains": "exposed",
                "generic": True,
                "basis": f"rank {rank}'s collective wait per step: comm_ops wait_ms {_fmt(r['wait'])} ms / steps",
                "severity": "high" if r["ratio"] > WAIT_RATIO_HIGH and big else "medium",
                "message": (
                    f"Rank {rank} spends {r['ratio']:.0%} of its collective time waiting for peers "
                    f"(> {WAIT_RATIO:.0%}): look for a slow rank, load imbalance or unsynchronized start."
                ),
                "evidence": (
                    f"comm_ops[rank={rank}, op_type not send/recv]: wait {_fmt(r['wait'])} ms / (wait+transit) "
                    f"{_fmt(r['wait'] + r['transit'])} ms = {_fmt(r['ratio'])}; {_fmt(r['wait_per_step'])} ms wait "
                    "per step"
                ),
            }
        )
    return out


def rule_slow_rank(tables, summary):
    sr = _t(tables, "slow_ranks")
    if sr is None or "slow" not in sr.columns:
        return []
    hit = sr[sr["slow"].astype(bool) & (sr.get("scope", "group") == "group")]
    steps = _n_steps(tables)
    stage_of, members = _stage_of(tables), _group_members(tables)
    bottleneck = _bottleneck_stage(tables)
    out = []
    for _, r in hit.iterrows():
        # the others' wait for it: its summed lateness (mean over its collectives x their count; a rank that is not
        # last at a collective is 0 ms late there) per step
        late, n = float(r["mean_lateness_ms"]), float(r["n_ops"])
        total = float(r["total_lateness_ms"]) if pd.notna(r.get("total_lateness_ms")) else late * n
        gain = total / steps if steps and pd.notna(total) else None
        # a group between pipeline stages (a pp group, or one whose ranks sit on different stages) has a "slow rank"
        # whenever the stages are unbalanced: the rank of the slower stage arrives last at every transfer
        cross = (
            str(r.get("group_kind")) == "pp"
            or len({stage_of.get(m) for m in members.get(str(r["group"]), ())} - {None}) > 1
        )
        out.append(
            {
                "rule": "slow_rank",
                "key": f"{r['group']}:{int(r['rank'])}",
                "ranks": [int(r["rank"])],
                "gain_ms": gain,
                "explains": "exposed",
                "cross_stage": cross,
                "basis": (
                    f"straggler lateness x collectives it delays: {_fmt(total)} ms late in all (mean {_fmt(late)} ms "
                    f"over {n:.0f} collectives) / {steps} steps"
                    if gain is not None
                    else "not estimated: the number of profiled steps is unknown"
                ),
                "severity": "high",
                "message": (
                    f"Rank {r['rank']} is the rank the others wait for in "
                    f"{(str(r['group_kind']) + ' ') if pd.notna(r.get('group_kind', None)) else ''}group "
                    f"'{r['group']}' "
                    f"(mean {_fmt(r['mean_lateness_ms'])} ms late per collective). Check its input "
                    f"pipeline, host load, and compute imbalance."
                ),
                "evidence": (
                    f"slow_ranks[group={r['group']}, rank={r['rank']}]: {r['test']} statistic "
                    f"{_fmt(r['statistic'], 3)} > {_fmt(r['critical'], 3)}, last in "
                    f"{r['last_arrivals']}/{r['n_ops']} ops"
                ),
            }
        )
        if cross and bottleneck is not None:
            at = f" (stage {stage_of[int(r['rank'])]})" if int(r["rank"]) in stage_of else ""
            out[-1]["message"] = (
                f"Rank {r['rank']}{at} arrives last in group '{r['group']}' between pipeline stages (mean "
                f"{_fmt(r['mean_lateness_ms'])} ms late per transfer) while stage {bottleneck[0]} computes "
                f"{bottleneck[1]:.1f}x the least stage: the other stage waits for the slower one. This is the "
                f"pipeline split, not a slow rank: rebalance the layers across stages (see stage_imbalance)."
            )
    return out


def _group_members(tables) -> dict[str, set[int]]:
    """Communication group name -> the ranks that took part in its collectives (comm_ops)."""
    co = _t(tables, "comm_ops")
    if co is None or not {"group", "rank"} <= set(co.columns):
        return {}
    df = pd.DataFrame({"group": co["group"].astype(str), "rank": pd.to_numeric(co["rank"], errors="coerce")}).dropna()
    return {str(g): {int(x) for x in v} for g, v in df.groupby("group")["rank"].unique().items()}


def _stragglers(tables) -> set[int]:
    """Ranks a group's others wait for (slow_ranks, group scope), leaving out ranks late only in a group between
    pipeline stages while the stages are unbalanced (that lateness is the stage imbalance's)."""
    return {
        int(r["ranks"][0])
        for r in rule_slow_rank(tables, {})
        if not (r["cross_stage"] and _bottleneck_stage(tables) is not None)
    }


def rule_slow_link(tables, summary):
    sl = _t(tables, "slow_links")
    if sl is None or "slow" not in sl.columns:
        return []
    out = []
    for _, r in sl[sl["slow"].astype(bool)].iterrows():
        where = f"link {r['src']}->{r['dst']}" if r["kind"] == "link" else f"rank {r['src']}"
        steps = _n_steps(tables)
        ideal = r["size_mb"] / r["group_mean_gbps"] if r["group_mean_gbps"] > 0 else math.nan  # MB / (GB/s) = ms
        gain = max(float(r["time_ms"] - ideal), 0.0) / steps if steps and pd.notna(ideal) else None
        out.append(
            {
                "rule": "slow_link",
                "key": f"{r['kind']}:{r['group']}:{r['transport']}:{r['src']}-{r['dst']}",
                "gain_ms": gain,
                "explains": "exposed",
                "basis": (
                    f"the link's time minus the same bytes at the group mean bandwidth: ({_fmt(r['time_ms'])} - "
                    f"{_fmt(r['size_mb'])} MB / {_fmt(r['group_mean_gbps'])} GB/s) ms / {steps} steps"
                    if gain is not None
                    else "not estimated: steps or the group mean bandwidth unknown"
                ),
                "ranks": sorted({int(r["src"]), int(r["dst"])}),
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
    gain, basis = fusion_gain(co)
    return [
        {
            "rule": "small_packets",
            "key": "all",
            "gain_ms": gain,
            "basis": basis,
            "explains": "exposed",
            "try": {"parallel.comm_fusion": "all"},
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
    per["bw"] = bandwidth_gbps(per["size_mb"], per["time_ms"])
    out = []
    for (tr, rank), r in per.iterrows():
        ref = REFERENCE_BANDWIDTH_GBPS[tr]
        if r["bw"] < BANDWIDTH_REFERENCE_RATIO * ref:
            steps = _n_steps(tables)
            gain = max(float(r["time_ms"] - r["size_mb"] / ref), 0.0) / steps if steps else None
            out.append(
                {
                    "rule": "bandwidth_reference",
                    "key": f"{tr}:{rank}",
                    "gain_ms": gain,
                    "explains": "exposed",
                    "basis": (
                        f"time minus the same bytes at the {tr} reference: ({_fmt(r['time_ms'])} - "
                        f"{_fmt(r['size_mb'])} MB / {ref} GB/s) ms / {steps} steps"
                        if gain is not None
                        else "not estimated: the number of profiled steps is unknown"
                    ),
                    "ranks": [int(rank)] if pd.notna(rank) else [],
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


def _trusted(sb: pd.DataFrame | None) -> pd.DataFrame | None:
    """The step breakdown without the ranks marked inconsistent (None when nothing is left)."""
    if sb is None or "consistent" not in sb.columns:
        return sb
    keep = sb["consistent"].astype("boolean").fillna(True).astype(bool)
    return sb[keep] if keep.any() else None


def _breakdown_share(tables, col):
    sb = _trusted(_t(tables, "step_breakdown"))
    if sb is None or "step_us" not in sb.columns or col not in sb.columns:
        return None
    if not _num(sb, "computing_us").sum() > 0:
        return None  # no compute ops were profiled: the breakdown says nothing about idle or exposed time
    known = _num(sb, col).notna()  # steps whose part is unknown (null) say nothing about its share
    step = _num(sb, "step_us")[known].sum()
    if not step > 0:
        return None
    return float(_num(sb, col)[known].sum() / step), sb[known]


def _exposure_split(tables, sb: pd.DataFrame):
    """(p2p share of the exposed communication, per-rank table with stage) over the trusted ranks, from
    comm_exposure; (None, None) when the split is unknown."""
    ex = _t(tables, "comm_exposure")
    if ex is None:
        return None, None
    ex = ex[ex["rank"].isin(sb["rank"].unique())].dropna(subset=["exposed_p2p_us", "exposed_us"])
    if ex.empty or not ex["exposed_us"].sum() > 0:
        return None, None
    # median over steps: the first profiled step often carries compile waits (seconds of receive)
    per = ex.groupby("rank")[["exposed_us", "exposed_p2p_us"]].median()
    per["exposed_collective_us"] = per["exposed_us"] - per["exposed_p2p_us"]
    rs = _t(tables, "rank_stages")
    stage_of = {int(r): s for r, s in zip(rs["rank"], rs["stage"]) if pd.notna(s)} if rs is not None else {}
    per["stage"] = [stage_of.get(int(r)) for r in per.index]
    tot = per["exposed_us"].sum()
    return (float(per["exposed_p2p_us"].sum() / tot) if tot > 0 else None), per


def _exposed_comm_rows(tables, summary):
    r = _breakdown_share(tables, "communication_not_overlapped_us")
    if r is None:
        return []
    share, sb = r
    if share <= EXPOSED_COMM_SHARE:
        return []
    p2p, per = _exposure_split(tables, sb)
    base = (
        f"step_breakdown: sum communication_not_overlapped_us {_num(sb, 'communication_not_overlapped_us').sum():.0f}"
        f" / sum step_us {_num(sb, 'step_us').sum():.0f}"
    )
    sev = "high" if share > 2 * EXPOSED_COMM_SHARE else "medium"
    if p2p is None:
        return [
            {
                "rule": "exposed_communication",
                "kind": "collective",
                "severity": sev,
                "ranks": [],
                "stage": None,
                "message": (
                    f"{share:.0%} of step time is communication not hidden behind compute (> "
                    f"{EXPOSED_COMM_SHARE:.0%}); which ops it is (pipeline send/receive or gradient "
                    f"collectives) is unknown: see comm_types."
                ),
                "evidence": base,
            }
        ]
    split = (
        f"comm_exposure (median per rank over steps, summed over ranks): pipeline p2p "
        f"{per['exposed_p2p_us'].sum() / 1000:.2f} ms, collectives {per['exposed_collective_us'].sum() / 1000:.2f} "
        f"ms ({p2p:.0%} p2p)"
    )
    bottleneck = _bottleneck_stage(tables)
    if bottleneck is not None:
        stage, ratio = bottleneck
        waiting = per[per["stage"].notna() & (per["stage"] != stage)].sort_values("exposed_us", ascending=False)
        # waiting shows as the faster stages carrying more than their share of the exposed communication
        if len(waiting) and waiting["exposed_us"].sum() / per["exposed_us"].sum() > len(waiting) / len(per):
            wp2p = (
                waiting["exposed_p2p_us"].sum() / waiting["exposed_us"].sum() if waiting["exposed_us"].sum() > 0 else 0
            )
            return [
                {
                    "rule": "exposed_communication",
                    "kind": "pipeline",
                    "severity": sev,
                    "ranks": [int(x) for x in waiting.index],
                    "stage": None,
                    "message": (
                        f"{share:.0%} of step time is exposed communication, most of it on the ranks of the "
                        f"faster stages (ranks {', '.join(map(str, waiting.index))}: "
                        f"{waiting['exposed_us'].mean() / 1000:.3g} ms per step, {wp2p:.0%} pipeline "
                        f"send/receive) while stage {stage} computes {ratio:.1f}x more: they wait for stage "
                        f"{stage}. Fix the stage imbalance first (see stage_imbalance); overlapping gradient "
                        f"all-reduce would not remove this wait."
                    ),
                    "evidence": f"{base}; {split}",
                }
            ]
    if p2p >= P2P_MAJORITY:
        top = per.sort_values("exposed_p2p_us", ascending=False)
        worst = top[top["exposed_p2p_us"] >= 0.5 * top["exposed_p2p_us"].iloc[0]]
        stages = sorted({int(s) for s in worst["stage"] if s is not None and pd.notna(s)})
        where = (
            f"stage {stages[0]} (ranks {', '.join(map(str, worst.index))})"
            if len(stages) == 1
            else f"ranks {', '.join(map(str, worst.index))}"
        )
        return [
            {
                "rule": "exposed_communication",
                "kind": "pipeline",
                "severity": sev,
                "ranks": [int(x) for x in worst.index],
                "stage": stages[0] if len(stages) == 1 else None,
                "message": (
                    f"{share:.0%} of step time is exposed communication and {p2p:.0%} of it is pipeline "
                    f"send/receive waiting, mostly on {where}: the stages wait for each other, not for "
                    f"gradients. Balance the work across stages (see stage_imbalance) or use more "
                    f"micro-batches; overlapping gradient all-reduce would not help."
                ),
                "evidence": f"{base}; {split}",
            }
        ]
    top = per.sort_values("exposed_collective_us", ascending=False)
    worst = top[top["exposed_collective_us"] >= 0.5 * top["exposed_collective_us"].iloc[0]]
    ex = _t(tables, "comm_exposure")
    rough = (
        sorted(int(r) for r in ex.loc[ex["source"] == "profiler (receive only)", "rank"].unique())
        if ex is not None and "source" in ex.columns
        else []
    )
    if rough:
        return [
            {
                "rule": "exposed_communication",
                "kind": "collective",
                "severity": sev,
                "ranks": [int(x) for x in worst.index],
                "stage": None,
                "message": (
                    f"{share:.0%} of step time is communication not hidden behind compute (> "
                    f"{EXPOSED_COMM_SHARE:.0%}), at least {p2p:.0%} of it pipeline receives; on ranks "
                    f"{', '.join(map(str, rough))} the profiler counts send / batchSendRecv with the "
                    f"collectives, so how much is gradient all-reduce is not known without the kernels: "
                    f"check comm_types before overlapping or bucketing gradients."
                ),
                "evidence": f"{base}; {split}",
            }
        ]
    return [
        {
            "rule": "exposed_communication",
            "kind": "collective",
            "severity": sev,
            "ranks": [int(x) for x in worst.index],
            "stage": None,
            "message": (
                f"{share:.0%} of step time is communication not hidden behind compute (> "
                f"{EXPOSED_COMM_SHARE:.0%}), {1 - p2p:.0%} of it in collectives (most on ranks "
                f"{', '.join(map(str, worst.index))}): overlap gradient all-reduce with backward, "
                f"fuse/bucket gradients, compress gradients, or use fewer, larger collectives."
            ),
            "evidence": f"{base}; {split}",
        }
    ]


# ---- gains: helpers over the run's own tables ------------------------------------------------


def _step_ms(summary) -> float | None:
    v = (summary or {}).get("step_time_s")
    return float(v) * 1000.0 if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


def _n_steps(tables) -> int | None:
    """Profiled steps the comm_ops table covers (the divisor turning totals into per-step gains)."""
    co = _t(tables, "comm_ops")
    if co is None or "step" not in co.columns:
        return None
    n = int(pd.to_numeric(co["step"], errors="coerce").nunique())
    return n or None


def _stage_of(tables) -> dict[int, int]:
    rs = _t(tables, "rank_stages")
    return {int(r): int(s) for r, s in zip(rs["rank"], rs["stage"]) if pd.notna(s)} if rs is not None else {}


def _budget_part(sb: pd.DataFrame | None, col: str) -> float | None:
    """ms per step of one breakdown part: median over steps per rank, the largest rank (null when unknown)."""
    if sb is None or col not in sb.columns or "rank" not in sb.columns:
        return None
    v = pd.DataFrame({"rank": sb["rank"], "v": _num(sb, col)}).dropna()
    if v.empty:
        return None
    return float(v.groupby("rank")["v"].median().max()) / 1000.0


def time_budget(tables, summary) -> dict:
    """The time a step has to give, per kind, in ms per step (null = unknown): `exposed` communication (less the
    time the collectives waited for a core, load_excess_ms) and
    `idle` (free) time of the most exposed / most idle rank (step_breakdown medians over steps), `imbalance`
    = the stages' computing spread (max - min, stages table) + the largest within-group computing spread
    (rank_imbalance, groups whose ranks share a stage) or the ranks' median step-time spread (workload
    steps), whichever is larger; and `step` (summary step_time_s). Root gains are drawn from these pools."""
    sb = _trusted(_t(tables, "step_breakdown"))
    exposed = _budget_part(sb, "communication_not_overlapped_us")
    if exposed is not None:  # less what the collectives waited for a core: no finding can give that back
        exposed = max(0.0, exposed - load_excess_ms(_t(tables, "comm_ops")))
    out = {
        "exposed": exposed,
        "idle": _budget_part(sb, "free_us"),
        "imbalance": None,
        "step": _step_ms(summary),
    }
    imb = []
    st = _t(tables, "stages")
    if st is not None and "computing_ms" in st.columns:
        c = _num(st, "computing_ms").dropna()
        c = c[c > 0]
        if len(c) >= 2:
            imb.append(float(c.max() - c.min()))
    within = []
    ri = _t(tables, "rank_imbalance")
    if ri is not None and {"dimension", "spread_ms", "max_rank", "min_rank"} <= set(ri.columns):
        stage_of = _stage_of(tables)
        for _, r in ri[ri["dimension"] == "computing"].iterrows():
            a, b = stage_of.get(int(r["max_rank"])), stage_of.get(int(r["min_rank"]))
            if (a is None or b is None or a == b) and pd.notna(r["spread_ms"]):
                within.append(float(r["spread_ms"]))
    ws = _t(tables, "workload_steps")
    if ws is not None and {"rank", "step_time_s"} <= set(ws.columns) and ws["rank"].nunique() > 1:
        per = ws.groupby("rank")["step_time_s"].median()
        within.append(float(per.max() - per.median()) * 1000.0)
    if within:
        imb.append(max(within))
    if imb:
        out["imbalance"] = float(sum(imb))
    return out


def _transfer_ms(co: pd.DataFrame) -> pd.Series:
    """Time a collective spends moving data: transit_ms, else elapse_ms - wait_ms (waiting is not its cost)."""
    t = _num(co, "transit_ms")
    return t if not t.isna().all() else _num(co, "elapse_ms") - _num(co, "wait_ms").fillna(0.0)


def _fastest(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (columns op_type, n, size, t) with `floor`: the least time a collective of its kind and group size
    took at its size or any larger one (a larger message is never cheaper, so a larger one's time bounds it). A
    loaded machine only adds time to a collective (its ranks wait for a core); the floor is what it costs. (The
    fusion fit keeps each size's own minimum: floors borrowed from larger sizes flatten its latency term.)"""
    mins = df.groupby(["op_type", "n", "size"], as_index=False)["t"].min().sort_values(["op_type", "n", "size"])
    mins["floor"] = mins.groupby(["op_type", "n"])["t"].transform(lambda v: v[::-1].cummin()[::-1])
    return df.merge(mins[["op_type", "n", "size", "floor"]], on=["op_type", "n", "size"], how="left")


def fusion_gain(co: pd.DataFrame) -> tuple[float | None, str]:
    """ms per step that fusing every gradient collective of a group into one would save: the latency terms
    the collective cost model of perfbench.predict.comm (time = latency x ring hops + factor x bytes /
    bandwidth) says the extra collectives pay. Latency and bandwidth are fitted on this run's own
    collectives (least squares over transit time, or elapse - wait); removed latency per rank and step =
    latency x (hops of all its collectives - hops of one per group). Null when the fit has no latency."""
    import numpy as np

    from analyzers.analyses.collectives import factor, steps

    df = pd.DataFrame(
        {
            "rank": co.get("rank"),
            "step": co.get("step"),
            "op_type": co.get("op_type"),
            "size": _num(co, "size_bytes"),
            "group": co.get("group", pd.Series("", index=co.index)),
        }
    )
    df["n"] = pd.to_numeric(co["group_size"], errors="coerce") if "group_size" in co.columns else math.nan
    df["n"] = df["n"].fillna(co["rank"].nunique() if "rank" in co.columns else math.nan)
    df["t"] = _transfer_ms(co)
    df["op_type"] = df["op_type"].astype(str).str.lower()
    df = df[~df["op_type"].isin(["send", "recv"])].dropna(subset=["size", "t", "n", "rank"])
    if df.empty or "step" not in co.columns:
        return None, "not estimated: no collective with a size, a time and a step"
    kinds = df[["op_type", "n"]].drop_duplicates()
    hop = {(o, n): steps(o, int(n)) for o, n in zip(kinds["op_type"], kinds["n"])}
    fac = {(o, n): factor(o, int(n)) for o, n in zip(kinds["op_type"], kinds["n"])}
    key = list(zip(df["op_type"], df["n"]))
    df["hops"] = [hop[k] for k in key]
    # the fit reads the fastest of the collectives of one kind, group size and size: a loaded machine only adds
    # time to a collective (its ranks wait for a core), so the minimum is its cost and the fit does not grow
    # with the load (the latency of a busy 2-core VM is 10x a quiet one's; docs/advice.md "Calibration")
    fit = df.groupby(["op_type", "n", "size"], as_index=False).agg(t=("t", "min"), hops=("hops", "first"))
    fkey = list(zip(fit["op_type"], fit["n"]))
    X = np.column_stack([fit["hops"].to_numpy(float), np.array([fac[k] for k in fkey]) * fit["size"].to_numpy(float)])
    y = fit["t"].to_numpy(float)
    if not (X[:, 0] > 0).any():
        return None, "not estimated: no collective over more than one rank"
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    lat = float(coef[0])
    if coef[1] < 0:  # noise in the bytes term: latency alone
        lat = float(np.dot(X[:, 0], y) / np.dot(X[:, 0], X[:, 0]))
    if not lat > 0:
        return None, "not estimated: this run's collectives show no latency term (fit <= 0)"
    per = df.groupby(["rank", "step", "group"]).agg(hops=("hops", "sum"), one=("hops", "max"))
    removed = (per["hops"] - per["one"]).groupby(level=["rank", "step"]).sum()
    hops_per_step = float(removed.groupby(level="rank").mean().mean())
    gain = lat * hops_per_step
    return gain, (
        f"latency terms fusion removes (perfbench.predict.comm cost model, latency fitted on this run's "
        f"collectives): {lat * 1000:.3g} us per ring hop x {hops_per_step:.0f} hops per step per rank"
    )


def load_excess_ms(co: pd.DataFrame | None) -> float:
    """ms per step the collectives took beyond the fastest of their kind and group size at their size or larger
    (`_fastest`; per rank and step the sum of transfer time - that floor, the median over ranks and steps): on a
    loaded machine the time their ranks waited for a core, which no communication knob removes. 0 when unknown."""
    if co is None or not {"rank", "step", "op_type", "size_bytes"} <= set(co.columns):
        return 0.0
    df = pd.DataFrame(
        {
            "rank": co["rank"],
            "step": co["step"],
            "op_type": co["op_type"].astype(str).str.lower(),
            "n": pd.to_numeric(co["group_size"], errors="coerce") if "group_size" in co.columns else 0,
            "size": _num(co, "size_bytes"),
            "t": _transfer_ms(co),
        }
    )
    df = df[~df["op_type"].isin(["send", "recv"])].dropna(subset=["size", "t", "step"])
    if df.empty:
        return 0.0
    df["n"] = df["n"].fillna(0)
    df = _fastest(df)
    df["excess"] = df["t"] - df["floor"]
    v = float(df.groupby(["rank", "step"])["excess"].sum().median())
    return v if v > 0 else 0.0


def rule_exposed_comm(tables, summary):
    """Exposed communication; its gain is the exposed time itself (what hiding it would save), less the time its
    collectives waited for a core (load_excess_ms), which neither hiding nor shrinking them removes."""
    rows = _exposed_comm_rows(tables, summary)
    if not rows:
        return []
    sb = _trusted(_t(tables, "step_breakdown"))
    gain = _budget_part(sb, "communication_not_overlapped_us")
    excess = load_excess_ms(_t(tables, "comm_ops"))
    note = ""
    if gain is not None and excess > 0:
        note = f"; less {min(excess, gain):.3g} ms its collectives took beyond the fastest of their kind (load)"
        gain = max(0.0, gain - excess)
    for row in rows:
        row.update(
            key="all",
            gain_ms=gain,
            explains="exposed",
            generic=True,
            basis="the exposed communication per step (step_breakdown communication_not_overlapped_us, "
            "median per rank, the most exposed rank)" + note,
        )
        if row.get("kind") == "collective":
            row["try"], row["predicted_step_ms"] = _compression_try(tables, summary)
    return rows


#: CPU time of casting one fp32 gradient byte to fp16 and back (MindSpore CPU Cast, 1-4 M-element tensors, CPU
#: time: 1.6 ns; docs/advice.md "Calibration"): what fp16 compression adds per step where the casts run on the host
CPU_CAST_NS_PER_BYTE = 1.6


def _on_cpu(tables) -> bool:
    """The run's operators ran on the host CPU (the MindSpore CPU profile: every op's core_type is CPU)."""
    ops = _t(tables, "ops_for_checks")
    if ops is None or "core_type" not in ops.columns:
        return False
    return bool((ops["core_type"].astype(str).str.upper() == "CPU").all())


def _compression_try(tables, summary):
    """fp16 gradients halve the bytes term of the gradient collectives (perfbench.predict.comm): the
    predicted step is the step minus half of the bytes time per step (fitted bandwidth), capped by the
    exposed communication, plus, where the casts run on the CPU, their cost (CPU_CAST_NS_PER_BYTE x the fp32
    gradient bytes a rank exchanges per step). Null prediction when the fit or the step is unknown."""
    import numpy as np

    from analyzers.analyses.collectives import factor

    co = _t(tables, "comm_ops")
    step = _step_ms(summary)
    knob = {"parallel.grad_compression": "fp16"}
    if co is None or step is None or "step" not in co.columns:
        return knob, None
    df = co[~co["op_type"].astype(str).str.lower().isin(["send", "recv"])] if "op_type" in co.columns else co
    t = _transfer_ms(df)
    n = (
        pd.to_numeric(df["group_size"], errors="coerce")
        if "group_size" in df.columns
        else pd.Series(math.nan, index=df.index)
    )
    n = n.fillna(co["rank"].nunique())
    f = np.array([factor(str(o).lower(), int(k)) for o, k in zip(df["op_type"], n)])
    size = _num(df, "size_bytes").to_numpy(float)
    ok = np.isfinite(size) & np.isfinite(t.to_numpy(float)) & (f > 0)
    if ok.sum() < 2:
        return knob, None
    xb = f[ok] * size[ok]
    y = t.to_numpy(float)[ok]
    inv_bw = float(np.dot(xb, y) / np.dot(xb, xb)) if np.dot(xb, xb) > 0 else 0.0
    if not inv_bw > 0:
        return knob, None
    ranks = max(int(df["rank"].nunique()), 1)
    bytes_ms = float(inv_bw * xb.sum()) / _n_steps(tables) / ranks
    sb = _trusted(_t(tables, "step_breakdown"))
    exposed = _budget_part(sb, "communication_not_overlapped_us")
    saved = 0.5 * bytes_ms if exposed is None else min(0.5 * bytes_ms, exposed)
    if _on_cpu(tables):
        saved -= CPU_CAST_NS_PER_BYTE * float(size[ok].sum()) / _n_steps(tables) / ranks / 1e6
    return knob, step - saved


def _bottleneck_stage(tables):
    """(slowest stage, its computing / the least stage's) when above STAGE_IMBALANCE_RATIO, else None."""
    st = _t(tables, "stages")
    if st is None:
        return None
    st = st.dropna(subset=["computing_ms"])
    st = st[st["computing_ms"] > 0]
    if len(st) < 2:
        return None
    ratio = st["computing_ms"].max() / st["computing_ms"].min()
    return (int(st.loc[st["computing_ms"].idxmax(), "stage"]), float(ratio)) if ratio > STAGE_IMBALANCE_RATIO else None


def _balanced_split_step(tables, summary, ranks: list[int], scale: float) -> float | None:
    """The step with the layers rebalanced: everything on the slowest stage's critical path moves with its
    layers (its compute, the host work of its layers, its idle time, its waits at the other stages' transfers,
    which the faster stages stop causing once they carry their share), except its exposed collective
    (data-parallel) communication; that part shrinks by `scale` = the stages' mean compute / the slowest
    stage's. Null without a step."""
    step = _step_ms(summary)
    if step is None:
        return None
    fixed = 0.0
    sb = _trusted(_t(tables, "step_breakdown"))
    if sb is not None:
        _, per = _exposure_split(tables, sb)
        if per is not None:
            mine = per[per.index.isin(ranks)]["exposed_collective_us"]
            fixed = min(step, max(0.0, float(mine.median()) / 1000.0)) if len(mine) else 0.0
    return fixed + (step - fixed) * scale


def rule_stage_imbalance(tables, summary):
    """The slowest pipeline stage (by compute) when it computes STAGE_IMBALANCE_RATIO x the least one."""
    st = _t(tables, "stages")
    if st is None or len(st) < 2:
        return []
    st = st.dropna(subset=["computing_ms"])
    st = st[st["computing_ms"] > 0]
    if len(st) < 2:
        return []
    hi, lo = st.loc[st["computing_ms"].idxmax()], st.loc[st["computing_ms"].idxmin()]
    ratio = hi["computing_ms"] / lo["computing_ms"]
    if ratio <= STAGE_IMBALANCE_RATIO:
        return []
    wait = ""
    sb = _trusted(_t(tables, "step_breakdown"))
    if sb is not None:
        _, per = _exposure_split(tables, sb)
        if per is not None:
            low = per[per["stage"] == lo["stage"]]
            if len(low) and low["exposed_us"].mean() > 0:
                wait = (
                    f" Stage {int(lo['stage'])} spends {low['exposed_us'].mean() / 1000:.3g} ms per step "
                    f"(median) in exposed communication ({low['exposed_p2p_us'].sum() / low['exposed_us'].sum():.0%} "
                    f"pipeline send/receive), waiting for it."
                )
    ranks = [int(x) for x in str(hi["ranks"]).split(",") if x != ""]
    mean = float(st["computing_ms"].mean())
    # a split the user fixed by hand (parallel.pipeline_split) has a knob to try: the cost-balanced split
    split = ((tables.get(CONFIG_KEY) or {}).get("parallel") or {}).get("pipeline_split")
    return [
        {
            "rule": "stage_imbalance",
            "try": {"parallel.pipeline_split": None} if split else None,
            "predicted_step_ms": _balanced_split_step(tables, summary, ranks, mean / float(hi["computing_ms"]))
            if split
            else None,
            "key": str(int(hi["stage"])),
            "gain_ms": float(hi["computing_ms"]) - mean,
            "explains": "imbalance",
            "basis": (
                f"the slowest stage's compute above the stages' mean, off the critical path when the layers are "
                f"rebalanced: {hi['computing_ms']:.3g} - {mean:.3g} ms per step"
            ),
            "severity": "high" if ratio > STAGE_IMBALANCE_HIGH else "medium",
            "ranks": ranks,
            "stage": int(hi["stage"]),
            "message": (
                f"Pipeline stage {int(hi['stage'])} is the bottleneck: stage {int(hi['stage'])} computes "
                f"{ratio:.1f}x more than stage {int(lo['stage'])} ({hi['computing_ms']:.3g} vs "
                f"{lo['computing_ms']:.3g} ms per step).{wait} Move layers off stage {int(hi['stage'])} (rebalance "
                f"the layer split{f', now {list(split)} by parallel.pipeline_split' if split else ''}) or use more "
                f"micro-batches."
            ),
            "evidence": (
                f"stages[stage={int(hi['stage'])}, ranks {hi['ranks']}]: computing_ms {hi['computing_ms']:.3f}; "
                f"stages[stage={int(lo['stage'])}, ranks {lo['ranks']}]: computing_ms {lo['computing_ms']:.3f}; "
                f"ratio {ratio:.3f} > {STAGE_IMBALANCE_RATIO}"
            ),
        }
    ]


_IMBALANCE_TEXT = {
    "computing": (
        "Rank {max_rank} computes {spread} ms more per step than rank {min_rank} in {group} ({max} vs {min} "
        "ms): the other ranks of the group wait for it. Check its data shard / sequence lengths, device "
        "frequency and host interference."
    ),
    "communication": (
        "In {group}, rank {max_rank} spends {max} ms per step in exposed communication and rank "
        "{min_rank} only {min} ms (spread {spread} ms): the ranks wait for a late rank, most likely "
        "rank {min_rank} (it waits least). Look at what delays it (compute, host, data)."
    ),
    "free": (
        "In {group}, rank {max_rank} idles {max} ms per step and rank {min_rank} {min} ms (spread {spread} ms): "
        "host-side delay on rank {max_rank} (data loading, op dispatch, Python, other processes)."
    ),
}


def rule_rank_imbalance(tables, summary):
    """msprof-analyze's slow-rank rule per parallel group (analyzers.analyses.imbalance)."""
    ri = _t(tables, "rank_imbalance")
    if ri is None or "flagged" not in ri.columns:
        return []
    out = []
    stage_of = _stage_of(tables)
    for _, r in ri[ri["flagged"].astype(bool)].iterrows():
        group = "all ranks" if r["group"] == "all" else f"group {r['group']}"
        stage = int(str(r["group"]).split()[-1]) if r["kind"] == "stage" else None
        hi_s, lo_s = stage_of.get(int(r["max_rank"])), stage_of.get(int(r["min_rank"]))
        cross = hi_s is not None and lo_s is not None and hi_s != lo_s
        gain = float(r["spread_ms"]) if pd.notna(r["spread_ms"]) else None
        row = {
            "rule": "rank_imbalance",
            "key": f"{r['group']}:{r['dimension']}",
            "gain_ms": gain,
            "explains": {"computing": "imbalance", "communication": "exposed", "free": "idle"}[r["dimension"]],
            "generic": r["dimension"] != "computing",
            "cross_stage": cross,
            "basis": (
                f"the spread between the slowest and the fastest rank of the group, which the others wait "
                f"for each step: {r['max_ms']:.3f} - {r['min_ms']:.3f} ms"
            ),
            "severity": "high" if r["ratio"] > IMBALANCE_HIGH else "medium",
            "ranks": [int(r["max_rank"]), int(r["min_rank"])],
            "stage": stage,
            "message": _IMBALANCE_TEXT[r["dimension"]].format(
                group=group,
                max_rank=int(r["max_rank"]),
                min_rank=int(r["min_rank"]),
                spread=f"{r['spread_ms']:.3f}",
                max=f"{r['max_ms']:.3f}",
                min=f"{r['min_ms']:.3f}",
            ),
            "evidence": (
                f"rank_imbalance[group={r['group']}, dimension={r['dimension']}]: rank {int(r['max_rank'])} "
                f"{r['max_ms']:.3f} ms - rank {int(r['min_rank'])} {r['min_ms']:.3f} ms = {r['spread_ms']:.3f} ms "
                f"/ mean step total {r['mean_total_ms']:.3f} ms = {r['ratio']:.3f} > {0.05} "
                f"(msprof-analyze slow-rank rule)"
            ),
        }
        if cross:  # ranks of different pipeline stages do different work by design: not a data-shard problem
            row["message"] = (
                f"In {group}, rank {int(r['max_rank'])} (stage {hi_s}) and rank {int(r['min_rank'])} "
                f"(stage {lo_s}) differ by {r['spread_ms']:.3f} ms per step in {r['dimension']} time: "
                f"they sit on different pipeline stages, so this is the pipeline split, not a slow "
                f"rank. Rebalance the layers across stages (see stage_imbalance)."
            )
        out.append(row)
    return out


def rule_aicpu_ops(tables, summary):
    """AI_CPU kernels longer than AICPU_MIN_TASK_US (msprof-analyze AicpuChecker)."""
    k = _t(tables, "ops_for_checks")
    if k is None or "core_type" not in k.columns:
        return []
    ai = k[k["core_type"].astype(str).str.upper().isin(["AI_CPU", "AICPU"])]
    long = ai[_num(ai, "dur_us") > AICPU_MIN_TASK_US]
    if long.empty:
        return []
    comp = k[k["category"].astype(str) == "compute"] if "category" in k.columns else k
    share = long["dur_us"].sum() / comp["dur_us"].sum() if comp["dur_us"].sum() > 0 else math.nan
    types = long.groupby(long["type"].astype(str))["dur_us"].sum().sort_values(ascending=False).head(5)
    return [
        {
            "rule": "aicpu_ops",
            "basis": "not estimated: the AI Core kernel that would replace them is not in the profile",
            "severity": "high" if share > 0.05 else "medium",
            "ranks": sorted(int(x) for x in long["rank"].unique()),
            "stage": None,
            "message": (
                f"{len(long)} AI_CPU kernels run longer than {AICPU_MIN_TASK_US:.0f} us "
                f"({long['dur_us'].sum() / 1000:.2f} ms, "
                f"{share:.1%} of compute time), led by {', '.join(types.index)}: AI_CPU ops are slow and "
                f"serialize with the AI Core; change the data type (e.g. int64/double -> int32/float) or the "
                f"code so an AI Core kernel is used."
            ),
            "evidence": (
                f"ops[core_type=AI_CPU, dur_us > {AICPU_MIN_TASK_US}]: {len(long)} of {len(ai)} AI_CPU ops; "
                + "; ".join(f"{t} {v / 1000:.3f} ms" for t, v in types.items())
            ),
        }
    ]


def rule_dynamic_shape(tables, summary):
    """Every operator with a known OP State is dynamic (msprof-analyze DynamicShapeChecker)."""
    k = _t(tables, "ops_for_checks")
    if k is None or "OP State" not in k.columns:
        return []
    out = []
    for rank, g in k.groupby("rank"):
        st = g["OP State"].dropna().astype(str).str.lower()
        st = st[st.isin(["dynamic", "static"])]
        if len(st) and (st == "dynamic").all():
            out.append(int(rank))
    if not out:
        return []
    n = int(k["OP State"].astype(str).str.lower().eq("dynamic").sum())
    return [
        {
            "rule": "dynamic_shape",
            "basis": "not estimated: the profile does not say what static shapes would cost",
            "severity": "medium",
            "ranks": out,
            "stage": None,
            "message": (
                f"All operators are compiled for dynamic shapes on ranks {', '.join(map(str, out))}: each launch "
                f"pays shape inference and kernel selection. For static shapes disable JIT compile "
                f"(torch_npu.npu.set_compile_mode(jit_compile=False)) or pad inputs to fixed buckets."
            ),
            "evidence": f"ops['OP State']: {n} ops 'dynamic', 0 'static' on ranks {', '.join(map(str, out))}",
        }
    ]


def rule_free_time(tables, summary):
    """Idle time on the host's account. The idle time of a straggler (a rank the others wait for, slow_ranks) is why
    it is late: with other ranks idle too, only those count (the host work every rank pays); with the straggler alone
    idle, the finding names it and folds under it. With imbalanced pipeline stages only the slowest stage's ranks
    count: the others' idle time is the wait for that stage (the stage_imbalance cause and its pipeline_bubble
    symptom), and host work removed there would not shorten the step; where the pipeline window is known
    (pipeline table), the slowest stage's idle time inside it is the host cost of its own layers and its wait at the
    pipeline's fill and drain, which move with the layer split: only the idle time outside the window is the
    host's, and a finding without it folds under stage_imbalance."""
    r = _breakdown_share(tables, "free_us")
    if r is None:
        return []
    share, sb = r
    on = ""
    late = _stragglers(tables)
    rest = sb[~sb["rank"].isin(late)]
    if late and len(rest) and _num(rest, "step_us").sum() > 0:
        rest_share = float(_num(rest, "free_us").sum() / _num(rest, "step_us").sum())
        if rest_share > FREE_SHARE:  # idle elsewhere too: the host work of every rank, the straggler's own left out
            sb, share = rest, rest_share
            on = (
                f" other than the straggler{'s' if len(late) > 1 else ''} {', '.join(map(str, sorted(late)))}: its "
                "idle time is why it is late (slow_rank)"
            )
    bottleneck = _bottleneck_stage(tables)
    window = None
    if bottleneck is not None:
        ranks = _stage_ranks(tables, bottleneck[0])
        if ranks and sb["rank"].isin(ranks).any():
            sb = sb[sb["rank"].isin(ranks)]
            share = float(_num(sb, "free_us").sum() / _num(sb, "step_us").sum())
            on = f" of the slowest pipeline stage {bottleneck[0]}; the other stages' idle time waits for it"
            window = _pipeline_window_us(tables, bottleneck[0])
    if share <= FREE_SHARE:
        return []
    per = sb.groupby("rank")[["free_us", "step_us"]].sum()
    per = per[per["step_us"] > 0]
    idle = sorted(int(r) for r in per.index[per["free_us"] / per["step_us"] > FREE_SHARE])
    row = {
        "rule": "free_time",
        "key": "all",
        "severity": "medium",
        "gain_ms": _budget_part(sb, "free_us"),
        "explains": "idle",
        "basis": "the idle time per step no op runs in (step_breakdown free_us, median per rank, the most idle rank"
        + (f"; ranks{on}" if on else "")
        + ")",
        "ranks": idle,
        "message": (
            f"{share:.0%} of step time nothing runs on the device (> {FREE_SHARE:.0%}): the host is the "
            f"bottleneck (data loading, Python overhead, op dispatch); try graph mode, data prefetch, more workers."
        ),
        "evidence": (
            f"step_breakdown: sum free_us {_num(sb, 'free_us').sum():.0f} / sum step_us {_num(sb, 'step_us').sum():.0f}"
        ),
    }
    if window is None:
        return [row]
    med = sb.groupby("rank")[["free_us", "step_us"]].median()
    outside = _idle_outside(sb, window).groupby(sb["rank"]).median().reindex(med.index)
    out_share = float(outside.sum() / med["step_us"].sum()) if med["step_us"].sum() > 0 else 0.0
    evidence = (
        f"{row['evidence']}; pipeline[stage={bottleneck[0]}]: median window_us {window.median():.0f}, idle outside "
        f"it per rank (median over steps of step_us - window_us, at most free_us): "
        + ", ".join(f"rank {int(k)} {v:.0f} us" for k, v in outside.items())
    )
    if out_share > FREE_SHARE:
        return [
            dict(
                row,
                gain_ms=float(outside.max()) / 1000.0,
                ranks=sorted(int(k) for k in outside.index[outside / med["step_us"] > FREE_SHARE]),
                basis=(
                    f"the idle time per step outside the pipeline window on the slowest stage {bottleneck[0]}'s ranks "
                    "(median over steps of step_us - window_us, the most idle rank): the idle time inside the window "
                    "is the stage's own host cost and its fill/drain wait (stage_imbalance)"
                ),
                message=(
                    f"{out_share:.0%} of step time nothing runs on the device outside the pipeline's forward/backward "
                    f"window (> {FREE_SHARE:.0%}): the host is the bottleneck between steps (data loading, Python "
                    f"overhead, optimizer dispatch); try data prefetch, more workers, graph mode."
                ),
                evidence=evidence,
            )
        ]
    return [
        dict(
            row,
            in_pipeline=True,
            message=(
                f"{share:.0%} of step time nothing runs on the device on the slowest pipeline stage "
                f"{bottleneck[0]}, inside the pipeline window: the host cost of its own layers (op dispatch) and its "
                f"wait at the pipeline's fill and drain. Both move with the layer split (see stage_imbalance)."
            ),
            evidence=evidence,
        )
    ]


def _pipeline_window_us(tables, stage) -> pd.Series | None:
    """One stage's pipeline window (us) per step (pipeline table), None when unknown."""
    pl = _t(tables, "pipeline")
    if pl is None or not {"stage", "window_us", "step"} <= set(pl.columns):
        return None
    pl = pl[pd.to_numeric(pl["stage"], errors="coerce") == stage]
    w = pd.Series(_num(pl, "window_us").to_numpy(), index=pd.to_numeric(pl["step"], errors="coerce")).dropna()
    w = w[w > 0]
    return w.groupby(level=0).median() if len(w) else None


def _idle_outside(sb: pd.DataFrame, window: pd.Series) -> pd.Series:
    """Per step_breakdown row, the idle time outside the pipeline window of its step: step_us - window_us, at least
    0 and at most free_us; a step the pipeline table lacks compares with the median window."""
    step = pd.to_numeric(sb["step"], errors="coerce") if "step" in sb.columns else pd.Series(math.nan, index=sb.index)
    w = step.map(window).fillna(float(window.median()))
    return (_num(sb, "step_us") - w).clip(lower=0.0).clip(upper=_num(sb, "free_us"))


def _stage_ranks(tables, stage) -> list[int]:
    rs = _t(tables, "rank_stages")
    if rs is None:
        return []
    return sorted(int(r) for r, s in zip(rs["rank"], rs["stage"]) if pd.notna(s) and int(s) == int(stage))


def rule_pipeline_bubble(tables, summary):
    pl = _t(tables, "pipeline")
    if pl is None or "bubble_fraction" not in pl.columns:
        return []
    out = []
    # median over steps: the first profiled step often carries compile/warm-up waits
    per = (
        pl.groupby("stage").agg(
            frac=("bubble_fraction", "median"),
            ideal=("ideal_fraction", "mean"),
            n=("bubble_fraction", "size"),
            window=("window_us", "median"),
            S=("stages", "max"),
            M=("micro_batches", "max"),
        )
        if {"window_us", "stages", "micro_batches"} <= set(pl.columns)
        else pl.groupby("stage").agg(
            frac=("bubble_fraction", "median"), ideal=("ideal_fraction", "mean"), n=("bubble_fraction", "size")
        )
    )
    step_ms = _step_ms(summary)
    for stage, r in per.iterrows():
        excess = r["frac"] - r["ideal"] if pd.notna(r["ideal"]) else math.nan
        bad = excess > BUBBLE_EXCESS if pd.notna(excess) else r["frac"] > BUBBLE_FRACTION
        if not bad:
            continue
        ideal_txt = f"ideal {r['ideal']:.0%}" if pd.notna(r["ideal"]) else "ideal unknown"
        window = r.get("window", math.nan)
        gain = float(excess * window / 1000.0) if pd.notna(excess) and pd.notna(window) else None
        knob, pred = None, None
        S, M = r.get("S", math.nan), r.get("M", math.nan)
        if pd.notna(S) and pd.notna(M) and S > 1 and pd.notna(window):
            from analyzers.analyses.pipeline import ideal_bubble_fraction

            knob = {"parallel.micro_batches": int(2 * M)}
            saved = (
                (ideal_bubble_fraction(int(S), int(M)) - ideal_bubble_fraction(int(S), int(2 * M))) * window / 1000.0
            )
            pred = step_ms - saved if step_ms is not None else None
        out.append(
            {
                "rule": "pipeline_bubble",
                "key": str(int(stage)),
                "gain_ms": gain,
                "explains": "exposed",
                "try": knob,
                "predicted_step_ms": pred,
                "basis": (
                    f"the bubble above the ideal (S-1)/(M+S-1) times the stage's window: {excess:.3f} x "
                    f"{window / 1000:.3g} ms (medians over steps)"
                    if gain is not None
                    else "not estimated: the ideal bubble (S, M) or the window is unknown"
                ),
                "stage": int(stage),
                "ranks": _stage_ranks(tables, stage),
                "severity": "medium",
                "message": (
                    f"Pipeline stage {stage} is idle {r['frac']:.0%} of the pipeline window ({ideal_txt}): "
                    f"more micro-batches, balance layers across stages, or an interleaved/1F1B schedule."
                ),
                "evidence": f"pipeline[stage={stage}]: median bubble_fraction {_fmt(r['frac'], 3)} over "
                f"{int(r['n'])} steps",
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
                "basis": "not estimated: the step time an even expert load would save is not in the tables",
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
                "basis": "not estimated: dropped tokens cost accuracy, not step time",
                "severity": "medium",
                "message": f"{dropped:.1%} of routed tokens are dropped by the expert capacity limit: raise "
                "capacity_factor.",
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
                    "key": str(int(rank)),
                    "gain_ms": (v - med) * 1000.0,
                    "explains": "imbalance",
                    "generic": True,
                    "basis": f"rank {rank}'s median step time above the ranks' median: ({v:.4f} - {med:.4f}) s",
                    "ranks": [int(rank)],
                    "severity": "medium",
                    "message": f"Rank {rank}'s median step time {v:.4f} s is {v / med - 1:.0%} above the ranks' "
                    f"median {med:.4f} s.",
                    "evidence": f"workload_steps[rank={rank}]: median step_time_s {v:.4f}",
                }
            )
    return out


def _from_module_rows(rows, explains: str | None) -> list[dict]:
    """Rows of the rule modules that return finished advice rows (analyzers/analyses/advice_memory.py,
    analyzers/analyses/advice_tp.py) in the form a rule here returns: `key` from their id, `try` as a dict; `advise()`
    gives them their id, links, accounting, severity and place like any other rule's."""
    out = []
    for r in rows:
        r = {k: v for k, v in dict(r).items() if k not in ("gain_share", "symptom_of")}
        rid = str(r.pop("id", "") or "")
        r["key"] = rid.partition(":")[2] or "all"
        t = r.get("try")
        r["try"] = json.loads(t) if isinstance(t, str) else (t or None)
        r.setdefault("explains", explains)
        out.append(r)
    return out


def rule_memory(tables, summary):
    """Near capacity (the cheapest knob that fits) and fragmentation (analyzers/analyses/advice_memory.py): memory, not
    time, so no gain: they sort after the findings with one."""
    from analyzers.analyses.advice_memory import advise_memory

    df = advise_memory(tables, summary, tables.get(CONFIG_KEY))
    return _from_module_rows(df.to_dict("records"), None) if len(df) else []


def rule_tensor_parallel(tables, summary):
    """Exposed tensor-parallel all-reduce (analyzers/analyses/advice_tp.py): its gain is exposed communication time."""
    from analyzers.analyses.advice_tp import advise_tp

    return _from_module_rows(advise_tp(tables, summary, tables.get(CONFIG_KEY)), "exposed")


#: where `analysis()` hands the run config to the rules that need it (memory, tensor parallel)
CONFIG_KEY = "_config"


@dataclass(frozen=True)
class Fold:
    """One cause a finding folds under: the root finding of rule `cause` (the one with the largest gain) when `when`
    (symptom row, cause row) holds; with `to_root`, the cause's own root when that finding is itself a symptom. A
    rule's folds are tried in order, the first that holds wins; a fold whose cause is the rule itself folds every
    finding of it that is left a root under the largest one (one wait seen from several ranks)."""

    cause: str
    doc: str
    when: Callable[[dict, dict], bool] | None = None
    to_root: bool = False


@dataclass(frozen=True)
class Rule:
    """One rule: the function that finds (`run(tables, summary) -> rows`), the finding ids it emits, the tables it
    reads, the module constants that are its thresholds, and per emitted id the causes it folds under (Fold)."""

    run: Callable[[dict, dict], list[dict]]
    emits: tuple[str, ...]
    reads: tuple[str, ...]
    thresholds: tuple[str, ...] = ()
    folds: dict[str, tuple[Fold, ...]] = field(default_factory=dict)


def _gains_known(r: dict, c: dict) -> bool:
    return c.get("gain_ms") is not None and r.get("gain_ms") is not None and c["gain_ms"] >= FOLD_SHARE * r["gain_ms"]


_STAGE = "stage_imbalance"
_SLOW = "slow_rank"

RULES = [
    Rule(
        rule_stage_imbalance,
        (_STAGE,),
        ("stages", "rank_stages", "step_breakdown", "comm_exposure"),
        ("STAGE_IMBALANCE_RATIO", "STAGE_IMBALANCE_HIGH"),
    ),
    Rule(
        rule_rank_imbalance,
        ("rank_imbalance",),
        ("rank_imbalance", "rank_stages"),
        ("IMBALANCE_HIGH",),
        folds={
            "rank_imbalance": (
                Fold(_STAGE, "between ranks of different stages", lambda r, c: bool(r.get("cross_stage"))),
                Fold(_SLOW, "communication", lambda r, c: r.get("explains") == "exposed"),
                Fold(_STAGE, "communication, no straggler", lambda r, c: r.get("explains") == "exposed"),
                Fold(
                    _SLOW,
                    "free, its most idle rank the straggler",
                    lambda r, c: r.get("explains") == "idle" and bool(r["ranks"]) and r["ranks"][0] in c["ranks"],
                ),
                Fold("free_time", "free: under free_time's root", lambda r, c: r.get("explains") == "idle", True),
            )
        },
    ),
    Rule(
        rule_slow_rank,
        (_SLOW,),
        ("slow_ranks", "comm_ops", "rank_stages", "stages"),
        folds={_SLOW: (Fold(_STAGE, "in a group between stages", lambda r, c: bool(r.get("cross_stage"))),)},
    ),
    Rule(
        rule_wait_ratio,
        ("wait_ratio",),
        ("comm_ops",),
        ("WAIT_RATIO", "WAIT_RATIO_HIGH", "WAIT_MIN_MS_PER_STEP", "WAIT_STEP_SHARE_HIGH"),
        folds={
            "wait_ratio": (
                Fold(_SLOW, "always"),
                Fold(_STAGE, "no straggler"),
                Fold("exposed_communication", "no straggler or stage: part of that exposed time"),
                Fold("wait_ratio", "else the largest wait"),
            )
        },
    ),
    Rule(rule_slow_link, ("slow_link",), ("slow_links", "comm_ops")),
    Rule(
        rule_bandwidth_reference,
        ("bandwidth_reference",),
        ("comm_bandwidth", "comm_ops"),
        ("REFERENCE_BANDWIDTH_GBPS", "BANDWIDTH_REFERENCE_RATIO", "BANDWIDTH_MIN_MB"),
    ),
    Rule(
        rule_small_packets,
        ("small_packets",),
        ("comm_ops",),
        ("SMALL_PACKET_BYTES", "SMALL_PACKET_SHARE", "SMALL_PACKET_MIN_PER_STEP"),
    ),
    Rule(
        rule_exposed_comm,
        ("exposed_communication",),
        ("step_breakdown", "comm_exposure", "rank_stages", "stages", "comm_ops"),
        ("EXPOSED_COMM_SHARE", "P2P_MAJORITY"),
        folds={
            "exposed_communication": (
                Fold(_STAGE, "pipeline kind", lambda r, c: r.get("kind") == "pipeline"),
                Fold(_SLOW, "the straggler's gain >= FOLD_SHARE of it", _gains_known),
            )
        },
    ),
    Rule(
        rule_free_time,
        ("free_time",),
        ("step_breakdown", "slow_ranks", "comm_ops", "stages", "rank_stages", "pipeline"),
        ("FREE_SHARE",),
        folds={
            "free_time": (
                Fold(
                    _STAGE, "the slowest stage's, inside the pipeline window", lambda r, c: bool(r.get("in_pipeline"))
                ),
                Fold(
                    _SLOW,
                    "the idle ranks are the straggler",
                    lambda r, c: bool(r.get("ranks")) and set(r["ranks"]) <= set(c["ranks"]),
                ),
            )
        },
    ),
    Rule(
        rule_pipeline_bubble,
        ("pipeline_bubble",),
        ("pipeline", "rank_stages"),
        ("BUBBLE_EXCESS", "BUBBLE_FRACTION"),
        folds={"pipeline_bubble": (Fold(_STAGE, "always"),)},
    ),
    Rule(
        rule_expert_balance,
        ("expert_imbalance", "dropped_tokens"),
        ("experts",),
        ("EXPERT_MAX_MEAN", "EXPERT_CV", "DROPPED_FRACTION"),
    ),
    Rule(
        rule_step_spread,
        ("step_time_spread",),
        ("workload_steps",),
        ("STEP_TIME_SPREAD",),
        folds={
            "step_time_spread": (
                Fold(_SLOW, "its own rank", lambda r, c: r["ranks"] == c["ranks"]),
                Fold(_STAGE, "else"),
            )
        },
    ),
    Rule(rule_aicpu_ops, ("aicpu_ops",), ("ops_for_checks",), ("AICPU_MIN_TASK_US",)),
    Rule(rule_dynamic_shape, ("dynamic_shape",), ("ops_for_checks",)),
    Rule(rule_tensor_parallel, ("tensor_parallel_comm",), ("comm_exposure_classes", "steps", CONFIG_KEY)),
    Rule(rule_memory, ("memory_near_capacity", "memory_fragmentation"), ("memory", CONFIG_KEY)),
]

#: finding id -> the causes it folds under, in order (from the rules' records)
FOLDS: dict[str, tuple[Fold, ...]] = {k: v for rule in RULES for k, v in rule.folds.items()}

_ORDER = {"high": 0, "medium": 1, "low": 2}

#: severity from the gain's share of the step: >= GAIN_HIGH high, >= GAIN_MEDIUM medium, else low
#: (a finding whose gain is unknown keeps its rule's threshold label)
GAIN_HIGH = 0.10
GAIN_MEDIUM = 0.03
#: exposed communication folds under a straggler only when the straggler's gain explains at least this share of it
FOLD_SHARE = 0.5
#: at most this many roots are shown by default (show, advise, dashboard; --all shows all)
MAX_ROOTS = 5


def _link(rows: list[dict]) -> None:
    """Causes before symptoms: set `symptom_of` (the id of the explaining root) in place, from the rules' folds
    (`FOLDS`, declared on each Rule record; docs/advice.md's rule records are generated from them). A rule's causes
    are settled before its own findings (a finding folds under a root, never under a symptom); each finding takes
    the first of its folds whose cause is present and whose condition holds."""
    by_id = {r["id"]: r for r in rows}
    for r in rows:
        r["symptom_of"] = None

    def best(rule: str, to_root: bool) -> dict | None:
        c = [r for r in rows if r["rule"] == rule and (to_root or r["symptom_of"] is None)]
        if not c:
            return None
        top = max(c, key=lambda r: r.get("gain_ms") or 0.0)
        while to_root and top["symptom_of"] is not None:
            top = by_id[top["symptom_of"]]
        return top

    for rule in _fold_order({r["rule"] for r in rows}):
        mine = [r for r in rows if r["rule"] == rule]
        folds = FOLDS.get(rule, ())
        for r in mine:
            for f in folds:
                c = best(f.cause, f.to_root) if f.cause != rule else None
                if c is not None and (f.when is None or f.when(r, c)):
                    r["symptom_of"] = c["id"]
                    break
        left = [r for r in mine if r["symptom_of"] is None]
        if any(f.cause == rule for f in folds) and len(left) > 1:
            top = max(left, key=lambda r: r.get("gain_ms") or 0.0)
            for r in left:
                if r is not top:
                    r["symptom_of"] = top["id"]


def rule_records_markdown() -> str:
    """docs/advice.md's table of rule records, generated from RULES (tests/unit/test_advice_records.py checks that
    the docs hold exactly this text)."""
    g = globals()
    lines = [
        "| finding | function | reads | thresholds | folds under (first that holds) |",
        "|---|---|---|---|---|",
    ]
    for rule in RULES:
        th = ", ".join(f"`{n}` = {g[n]!r}" for n in rule.thresholds) or "–"
        reads = ", ".join(f"`{t}`" for t in rule.reads)
        for rid in rule.emits:
            folds = "; ".join(f"`{f.cause}` ({f.doc})" for f in rule.folds.get(rid, ())) or "–"
            lines.append(f"| `{rid}` | `{rule.run.__name__}` | {reads} | {th} | {folds} |")
    return "\n".join(lines) + "\n"


def _fold_order(rules: set[str]) -> list[str]:
    """The rules in an order where every cause a rule folds under comes before it (sorted names otherwise)."""
    out: list[str] = []

    def visit(rule: str, path: tuple[str, ...]) -> None:
        if rule in out:
            return
        if rule in path:
            raise ValueError(f"advice rules fold under each other in a cycle: {' -> '.join(path + (rule,))}")
        for f in FOLDS.get(rule, ()):
            if f.cause != rule:
                visit(f.cause, path + (rule,))
        out.append(rule)

    for rule in sorted(rules):
        visit(rule, ())
    return [r for r in out if r in rules]


def _account(rows: list[dict], budget: dict) -> None:
    """Each stretch of time explained once: root gains are drawn from their pool (`explains`: exposed,
    idle, imbalance; time_budget) and from the step, specific causes first (largest raw gain first), then
    the generic findings (exposed_communication, wait_ratio, step_time_spread, communication/free
    rank_imbalance), which get what is left. A gain cut down says so in its basis."""
    left = {k: v for k, v in budget.items() if v is not None}
    roots = [r for r in rows if r["symptom_of"] is None and r.get("gain_ms") is not None]
    roots.sort(key=lambda r: (bool(r.get("generic")), -r["gain_ms"]))
    for r in roots:
        raw, caps = max(float(r["gain_ms"]), 0.0), []
        for pool in (r.get("explains"), "step"):
            if pool in left and raw > left[pool]:
                raw = left[pool]
                caps.append(pool)
        for pool in {r.get("explains"), "step"}:
            if pool in left:
                left[pool] -= raw
        if caps:
            r["basis"] = (
                f"{r['basis']}; cut to the {caps[-1]} time no larger finding explains "
                f"({raw:.3g} ms of {float(r['gain_ms']):.3g})"
            )
        r["gain_ms"] = raw


def _order(rows: list[dict]) -> list[dict]:
    """Roots by gain_ms descending (unknown gains last, rule order kept), each root's symptoms after it."""

    def k(r):
        g = r.get("gain_ms")
        return (g is None, -(g or 0.0))

    roots = sorted([r for r in rows if r["symptom_of"] is None], key=k)
    out = []
    for root in roots:
        out.append(root)
        out.extend(sorted([r for r in rows if r["symptom_of"] == root["id"]], key=k))
    return out


def _severity(row: dict) -> str:
    share = row.get("gain_share")
    if share is None:
        return row.get("severity") or "medium"
    return "high" if share >= GAIN_HIGH else "medium" if share >= GAIN_MEDIUM else "low"


def advise(tables: dict[str, pd.DataFrame], summary: dict) -> pd.DataFrame:
    """Run every rule; one row per finding (ADVICE_COLUMNS), with its gain, ordered causes first by gain."""
    rows: list[dict] = []
    seen: set[str] = set()
    for rule in RULES:
        for row in rule.run(tables or {}, summary or {}):
            row = {
                "ranks": [],
                "stage": None,
                "gain_ms": None,
                "basis": None,
                "explains": None,
                "try": None,
                "predicted_step_ms": None,
                **row,
            }
            rid = f"{row['rule']}:{row.get('key', 'all')}"
            while rid in seen:
                rid += "+"
            seen.add(rid)
            row["id"] = rid
            g = row["gain_ms"]
            row["gain_ms"] = float(g) if g is not None and pd.notna(g) and math.isfinite(g) else None
            rows.append(row)
    if not rows:
        return pd.DataFrame(columns=ADVICE_COLUMNS)
    _link(rows)
    _account(rows, time_budget(tables or {}, summary or {}))
    step = _step_ms(summary)
    for r in rows:
        r["gain_share"] = r["gain_ms"] / step if r["gain_ms"] is not None and step else None
        r["severity"] = _severity(r)
        if r["basis"] is None:
            r["basis"] = "not estimated"
        if r["try"] is not None:
            if (
                r["predicted_step_ms"] is None
                and step is not None
                and r["gain_ms"] is not None
                and r["symptom_of"] is None
            ):
                r["predicted_step_ms"] = step - r["gain_ms"]
            r["try"] = json.dumps(r["try"], sort_keys=True)
    df = pd.DataFrame(_order(rows), columns=ADVICE_COLUMNS)
    df["stage"] = pd.array([None if s is None or pd.isna(s) else int(s) for s in df["stage"]], dtype="Int64")
    for c in ("gain_ms", "gain_share", "predicted_step_ms"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df.reset_index(drop=True)


def analysis(ctx):
    """Registry entry `advice` (runs last: reads every table and metric before it)."""
    return Output(
        tables={
            "advice": advise(
                dict(
                    ctx.tables,
                    workload_steps=ctx.table("workload_steps"),
                    ops_for_checks=ctx.table("ops"),
                    steps=ctx.table("steps"),
                    **{CONFIG_KEY: ctx.config},
                ),
                ctx.metrics,
            )
        }
    )
