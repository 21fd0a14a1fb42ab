"""Rule `small_packets`: many collectives moving less than SMALL_PACKET_BYTES each. Its gain is the latency terms
fusing them removes (`fusion_gain`), on the unprofiled step's scale (`unprofiled_scale`); it draws on the exposed
time with the collectives' waits for a core left in (`EXPOSED_WITH_LOAD`): those waits come once per collective, and
fusing removes the collectives; it tries `parallel.comm_fusion: all`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.analyses.collectives import factor, steps
from analyzers.analyses.advice.budget import EXPOSED_WITH_LOAD
from analyzers.analyses.advice.common import num, table, transfer_ms
from analyzers.analyses.advice.rule import Rule

ID = "small_packets"

#: a collective moving less than this many bytes is a "small packet" (msprof-analyze: RDMA 1 MB)
SMALL_PACKET_BYTES = 1 << 20
#: advise fusion when at least this share of collectives (and of their time) is small packets ...
SMALL_PACKET_SHARE = 0.2
#: ... and there are at least this many collectives per step
SMALL_PACKET_MIN_PER_STEP = 8
#: at least this share of collectives small: high severity (when the gain is unknown)
SMALL_PACKET_SHARE_HIGH = 0.5


def fusion_gain(co: pd.DataFrame) -> tuple[float | None, str]:
    """ms per step that fusing every gradient collective of a group into one would save: the latency terms
    the collective cost model of perfbench.predict.comm (time = latency x ring hops + factor x bytes /
    bandwidth) says the extra collectives pay. Latency and bandwidth are fitted on this run's own
    collectives (least squares over transit time, or elapse - wait, the fastest of each kind, group size and
    size, so that load does not inflate it); removed latency per rank and step =
    latency x (hops of all its collectives - hops of one per group). Null when the fit has no latency."""
    df = pd.DataFrame(
        {
            "rank": co.get("rank"),
            "step": co.get("step"),
            "op_type": co.get("op_type"),
            "size": num(co, "size_bytes"),
            "group": co.get("group", pd.Series("", index=co.index)),
        }
    )
    df["n"] = pd.to_numeric(co["group_size"], errors="coerce") if "group_size" in co.columns else math.nan
    df["n"] = df["n"].fillna(co["rank"].nunique() if "rank" in co.columns else math.nan)
    df["t"] = transfer_ms(co)
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


def unprofiled_scale(summary) -> float:
    """The unprofiled step over the profiled one (the workload's own step records: step_time_s /
    profiled_step_time_s), at most 1; 1 when either is unknown. The fit reads the profiled collectives, which the
    profiler stretches (a PyTorch gloo job's profiled step was 1.9x its unprofiled one at load ~7, docs/advice.md),
    while the fix is measured on unprofiled steps."""
    on, off = (summary or {}).get("profiled_step_time_s"), (summary or {}).get("step_time_s")
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (on, off))
    return min(1.0, float(off) / float(on)) if ok else 1.0


def find(tables, summary):
    co = table(tables, "comm_ops")
    if co is None:
        return []
    size = num(co, "size_bytes")
    el = num(co, "elapse_ms")
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
    scale = unprofiled_scale(summary)
    if gain is not None and scale < 1.0:
        gain *= scale
        basis += f", x {scale:.3g} (unprofiled / profiled step)"
    return [
        {
            "key": "all",
            "gain_ms": gain,
            "basis": basis,
            "explains": EXPOSED_WITH_LOAD,
            "try": {"parallel.comm_fusion": "all"},
            "severity": "medium" if share < SMALL_PACKET_SHARE_HIGH else "high",
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


RULE = Rule(
    id=ID,
    find=find,
    needs=("comm_ops",),
    thresholds={
        "SMALL_PACKET_BYTES": SMALL_PACKET_BYTES,
        "SMALL_PACKET_SHARE": SMALL_PACKET_SHARE,
        "SMALL_PACKET_MIN_PER_STEP": SMALL_PACKET_MIN_PER_STEP,
        "SMALL_PACKET_SHARE_HIGH": SMALL_PACKET_SHARE_HIGH,
    },
    fires=(
        "≥ `SMALL_PACKET_SHARE` of collectives and of their time move < `SMALL_PACKET_BYTES` bytes, with ≥ "
        "`SMALL_PACKET_MIN_PER_STEP` collectives per step and rank → fuse/bucket (high when ≥ "
        "`SMALL_PACKET_SHARE_HIGH` of them are small); evidence: counts, median size"
    ),
    gain=(
        "latency terms fusion removes, by `perfbench.predict.comm`'s cost model `t = latency × ring hops + factor × "
        "bytes / bandwidth`: latency per hop and bandwidth fitted by least squares on this run's own collectives "
        "(transit time, else elapse − wait; the fastest of each kind, group size and size, so that a loaded machine, "
        "which only adds time to a collective, does not inflate the fit); per rank and step, latency × (Σ hops of its "
        "collectives − hops of one collective per group), times the unprofiled step over the profiled one (the "
        "workload's step records, at most 1: the profiler stretches each collective, the fix is measured "
        "unprofiled); drawn on the exposed time with the collectives' waits for a core left in (they come once per "
        "collective and fusing removes the collectives); null when the fit finds no latency"
    ),
    knobs=("parallel.comm_fusion",),
    tries='`{"parallel.comm_fusion": "all"}`, predicted step = step − gain',
)
