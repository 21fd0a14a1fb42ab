"""Rule `bandwidth_reference`: a rank whose transfers on a transport reach under half the link's reference
bandwidth. The reference bandwidths are the hardware catalogue's (perfbench/predict/hardware/ascend910.yaml,
`reference_bandwidth_gbps`), read here as data: the one home of those numbers."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from analyzers.analyses.advice.common import excess_ms_per_step, fmt, n_steps, num, table
from analyzers.analyses.advice.rule import Rule
from analyzers.schema import bandwidth_gbps

ID = "bandwidth_reference"

#: the hardware catalogue's Ascend 910 profile, which holds the reference bandwidth per transport
HARDWARE = Path(__file__).resolve().parents[3] / "perfbench" / "predict" / "hardware" / "ascend910.yaml"


def reference_bandwidths(path: Path = HARDWARE) -> dict[str, float]:
    """Transport (upper case, as the profiler names it) -> reference bandwidth GB/s, from the hardware profile."""
    doc = yaml.safe_load(path.read_text())
    return {str(k).upper(): float(v) for k, v in doc["reference_bandwidth_gbps"].items()}


#: reference bandwidth per transport, GB/s (ascend910.yaml says where each comes from). CPU MCCL has no reference.
REFERENCE_BANDWIDTH_GBPS = reference_bandwidths()
#: measured bandwidth below this share of the reference is "far under the link's reference"
BANDWIDTH_REFERENCE_RATIO = 0.5
#: only transfers at least this large (MB) are judged against the reference (small ones are latency bound)
BANDWIDTH_MIN_MB = 1.0


def _per_rank(cb: pd.DataFrame) -> pd.DataFrame | None:
    """Per (transport, rank): summed size and time of the transfers >= BANDWIDTH_MIN_MB, and their bandwidth."""
    df = pd.DataFrame(
        {
            "rank": cb.get("rank"),
            "transport": cb["transport"].astype(str).str.upper(),
            "size_mb": num(cb, "size_mb"),
            "time_ms": num(cb, "time_ms"),
        }
    ).dropna(subset=["size_mb", "time_ms"])
    df = df[df["transport"].isin(REFERENCE_BANDWIDTH_GBPS) & (df["size_mb"] >= BANDWIDTH_MIN_MB)]
    if df.empty:
        return None
    per = df.groupby(["transport", "rank"])[["size_mb", "time_ms"]].sum()
    per = per[per["time_ms"] > 0]
    per["bw"] = bandwidth_gbps(per["size_mb"], per["time_ms"])
    return per


def find(tables, summary):
    cb = table(tables, "comm_bandwidth", "transport")
    if cb is None:
        return []
    per = _per_rank(cb)
    if per is None:
        return []
    out = []
    for (tr, rank), r in per.iterrows():
        ref = REFERENCE_BANDWIDTH_GBPS[tr]
        if r["bw"] >= BANDWIDTH_REFERENCE_RATIO * ref:
            continue
        steps = n_steps(tables)
        gain = excess_ms_per_step(r["time_ms"], r["size_mb"], ref, steps)
        out.append(
            {
                "key": f"{tr}:{rank}",
                "gain_ms": gain,
                "explains": "exposed",
                "basis": (
                    f"time minus the same bytes at the {tr} reference: ({fmt(r['time_ms'])} - "
                    f"{fmt(r['size_mb'])} MB / {ref} GB/s) ms / {steps} steps"
                    if gain is not None
                    else "not estimated: the number of profiled steps is unknown"
                ),
                "ranks": [int(rank)] if pd.notna(rank) else [],
                "severity": "medium",
                "message": (
                    f"Rank {rank} {tr} bandwidth {fmt(r['bw'])} GB/s is under "
                    f"{BANDWIDTH_REFERENCE_RATIO:.0%} of the {tr} reference {ref} GB/s for transfers >= "
                    f"{BANDWIDTH_MIN_MB} MB: check link health, contention with compute (SDMA), or packet sizes."
                ),
                "evidence": (
                    f"comm_bandwidth[rank={rank}, transport={tr}, size_mb>={BANDWIDTH_MIN_MB}]: "
                    f"{fmt(r['size_mb'])} MB in {fmt(r['time_ms'])} ms"
                ),
            }
        )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("comm_bandwidth", "comm_ops"),
    thresholds={
        "REFERENCE_BANDWIDTH_GBPS": REFERENCE_BANDWIDTH_GBPS,
        "BANDWIDTH_REFERENCE_RATIO": BANDWIDTH_REFERENCE_RATIO,
        "BANDWIDTH_MIN_MB": BANDWIDTH_MIN_MB,
    },
    fires=(
        "a rank's Σsize/Σtime on a transport (transfers ≥ `BANDWIDTH_MIN_MB` MB) < `BANDWIDTH_REFERENCE_RATIO` × "
        "`REFERENCE_BANDWIDTH_GBPS` (GB/s, `reference_bandwidth_gbps` of perfbench/predict/hardware/ascend910.yaml: "
        "msprof-analyze's SDMA baseline for HCCS/SDMA/SIO, RDMA at 100 GbE, PCIe 4.0 x16 in practice; CPU "
        "MCCL has none); evidence: comm_bandwidth rows"
    ),
    gain="(time − the same bytes at the transport's reference bandwidth) / steps",
)
