"""Rule `small_packets`: many collectives moving less than SMALL_PACKET_BYTES each. Its gain is the latency terms
fusing them removes (`fusion_gain`), on the unprofiled step's scale (`unprofiled_scale`); it tries
`parallel.comm_fusion: all`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analyzers.analyses.collectives import factor, steps
from analyzers.analyses.advice.common import num, on_cpu, table, transfer_ms
from analyzers.analyses.advice.rule import Rule
from analyzers.stats import union_length

ID = "small_packets"

#: a collective moving less than this many bytes is a "small packet" (msprof-analyze: RDMA 1 MB)
SMALL_PACKET_BYTES = 1 << 20
#: advise fusion when at least this share of collectives (and of their time) is small packets ...
SMALL_PACKET_SHARE = 0.2
#: ... and there are at least this many collectives per step
SMALL_PACKET_MIN_PER_STEP = 2
#: at least this share of collectives small: high severity (when the gain is unknown)
SMALL_PACKET_SHARE_HIGH = 0.5


def fusion_gain(co: pd.DataFrame, observed: bool = False) -> tuple[float | None, str]:
    """ms per step that fusing every gradient collective of a group into one would save: the latency terms
    the collective cost model of perfbench.predict.comm (time = latency x ring hops + factor x bytes /
    bandwidth) says the extra collectives pay. Latency and bandwidth are fitted on this run's own
    collectives (least squares over transit time, or elapse - wait, the fastest of each kind, group size and
    size: the cost of a collective on an idle machine); removed latency per rank and step =
    latency x (hops of all its collectives - hops of one per group).

    `observed` (the operators ran on the host CPU, common.on_cpu): per rank, step and group the collectives'
    own summed time (times their `serial_share`: collectives that ran at once on several threads, gloo's, take
    their time together) less that of the one fused collective (the fit's time for all their bytes, at least the
    longest of them). On a loaded host every collective also waits for its ranks to be scheduled; one fused
    collective waits once, so fusion removes those waits with the latency terms (docs/advice.md,
    "Calibration"). Null when the fit has no latency."""
    df = pd.DataFrame(
        {
            "rank": co.get("rank"),
            "step": co.get("step"),
            "op_type": co.get("op_type"),
            "size": num(co, "size_bytes"),
            "group": co.get("group", pd.Series("", index=co.index)),
            "start": num(co, "start_us"),
            "elapse": num(co, "elapse_ms") * 1000.0,
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
    df["fac"] = [fac[k] for k in key]
    # the fit reads the fastest of the collectives of one kind, group size and size: a loaded machine only adds
    # time to a collective (its ranks wait for a core), so the minimum is its cost on an idle machine
    fit = df.groupby(["op_type", "n", "size"], as_index=False).agg(t=("t", "min"), hops=("hops", "first"))
    fkey = list(zip(fit["op_type"], fit["n"]))
    X = np.column_stack([fit["hops"].to_numpy(float), np.array([fac[k] for k in fkey]) * fit["size"].to_numpy(float)])
    y = fit["t"].to_numpy(float)
    if not (X[:, 0] > 0).any():
        return None, "not estimated: no collective over more than one rank"
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    lat, inv_bw = float(coef[0]), float(coef[1])
    if coef[1] < 0:  # noise in the bytes term: latency alone
        lat, inv_bw = float(np.dot(X[:, 0], y) / np.dot(X[:, 0], X[:, 0])), 0.0
    if not lat > 0:
        return None, "not estimated: this run's collectives show no latency term (fit <= 0)"
    df["bytes_term"] = df["fac"] * df["size"]
    per = df.groupby(["rank", "step", "group"]).agg(
        hops=("hops", "sum"),
        one=("hops", "max"),
        t=("t", "sum"),
        longest=("t", "max"),
        b=("bytes_term", "sum"),
        n=("t", "size"),
    )
    if observed:
        per["t"] = per["t"] * serial_share(df).reindex(per.index).fillna(1.0)
        fused = np.maximum(per["longest"], lat * per["one"] + inv_bw * per["b"])
        removed = (per["t"] - fused).clip(lower=0.0).groupby(level=["rank", "step"]).sum()
        gain = float(removed.groupby(level="rank").mean().mean())
        n_removed = float((per["n"] - 1).groupby(level=["rank", "step"]).sum().mean())
        return gain, (
            f"the collectives' own time fusion removes (operators on the host CPU: each collective also waits "
            f"for its ranks to be scheduled, one fused collective once): per rank and step their summed time less "
            f"one fused collective's ({lat * 1000:.3g} us per ring hop and the bytes term fitted on this run's "
            f"fastest collectives, at least the longest of them), {n_removed:.0f} collectives fewer per step"
        )
    removed = (per["hops"] - per["one"]).groupby(level=["rank", "step"]).sum()
    hops_per_step = float(removed.groupby(level="rank").mean().mean())
    gain = lat * hops_per_step
    return gain, (
        f"latency terms fusion removes (perfbench.predict.comm cost model, latency fitted on this run's "
        f"collectives): {lat * 1000:.3g} us per ring hop x {hops_per_step:.0f} hops per step per rank"
    )


def serial_share(df: pd.DataFrame) -> pd.Series:
    """Per rank, step and group: the wall time the collectives covered (the union of their [start, start +
    elapse] intervals) over their summed elapse, in (0, 1]; 1 where they ran one after another (MindSpore's), about
    1/2 where gloo's two worker threads ran them two at a time. Null where a start or an elapse is unknown."""
    d = df.dropna(subset=["start", "elapse"])
    if d.empty:
        return pd.Series(dtype=float)
    g = d.assign(end=d["start"] + d["elapse"]).groupby(["rank", "step", "group"])
    covered = g.apply(lambda x: union_length(x["start"].to_numpy(float), x["end"].to_numpy(float)))
    total = g["elapse"].sum()
    share = covered / total
    return share.where(total > 0).clip(upper=1.0)


def unprofiled_scale(summary) -> float:
    """The unprofiled step over the profiled one (the workload's own step records: step_time_s /
    profiled_step_time_s), at most 1; 1 when either is unknown. The fit reads the profiled collectives, which the
    profiler stretches (a PyTorch gloo job's profiled step was 1.9x its unprofiled one at load ~7, docs/advice.md),
    while the fix is measured on unprofiled steps."""
    on, off = (summary or {}).get("profiled_step_time_s"), (summary or {}).get("step_time_s")
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (on, off))
    return min(1.0, float(off) / float(on)) if ok else 1.0


#: traffic classes whose collectives carry activations, not gradients: gradient fusion (comm_fusion) cannot fuse them
NOT_GRADIENTS = ("tensor_parallel", "expert_dispatch")
#: the collective kinds gradient fusion (bucketing) merges: data-parallel all-reduces, ZeRO's reduce-scatters and
#: all-gathers (schema.COMM_OP_TYPES); a broadcast of buffers or a pipeline send is not bucketed
FUSABLE = ("allreduce", "reducescatter", "allgather")


def find(tables, summary):
    co = table(tables, "comm_ops")
    if co is None:
        return []
    if "comm_class" in co.columns:
        co = co[~co["comm_class"].isin(NOT_GRADIENTS)]
    if "op_type" in co.columns:
        co = co[co["op_type"].astype(str).str.lower().isin(FUSABLE)]
    if co.empty:
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
    cpu = on_cpu(tables)
    gain, basis = fusion_gain(co, observed=cpu)
    scale = unprofiled_scale(summary)
    if gain is not None and scale < 1.0:
        gain *= scale
        basis += f", x {scale:.3g} (unprofiled / profiled step)"
    return [
        {
            "key": "all",
            "gain_ms": gain,
            "basis": basis,
            "explains": "exposed",
            # on the host CPU the collectives' worker threads (gloo's) share the cores with the training thread: the
            # communication "overlapped" with compute stretches it, and fusing removes that time too
            "also_explains": ("overlapped",) if cpu else (),
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
    needs=("comm_ops", "ops_for_checks"),
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
        "(transit time, else elapse − wait; the fastest of each kind, group size and size: a collective's cost on an "
        "idle machine); per rank and step, latency × (Σ hops of its collectives − hops of one collective per group). "
        "Where the operators ran on the host CPU (the MindSpore CPU profile), per rank, step and group the "
        "collectives' own summed time less one fused collective's (the fit's time for all their bytes, at least the "
        "longest of them), mean over steps and ranks: on a loaded host each collective also waits for its ranks to "
        "be scheduled and one fused collective waits once (collectives that ran at once on several threads, gloo's, "
        "count their union), drawn from the exposed communication and then from the communication overlapped with "
        "compute (`overlapped`: on the host CPU the collectives' threads take the cores the compute needs, so "
        "overlapping does not hide them; a gloo job's ranks burned 90-170 ms of CPU per step beyond their training "
        "thread's ops). Either times the unprofiled step over the profiled one (the workload's step records, at "
        "most 1: the profiler stretches each collective, the fix is measured unprofiled). Null when the fit finds no "
        "latency"
    ),
    knobs=("parallel.comm_fusion",),
    tries='`{"parallel.comm_fusion": "all"}`, predicted step = step − gain',
)
