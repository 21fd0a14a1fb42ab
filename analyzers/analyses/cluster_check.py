"""Cross-check with msprof-analyze's own output found beside the rank folders (`cluster_analysis_output/`,
read by analyzers.parsers.ascend.cluster_output and kept in `profile.meta["cluster_output"]` by analyzers.parsers.load).

`cluster_check` table, one row per compared number:

    kind      "breakdown" (a step-trace part per rank and step) | "communication" (a per-op time per rank)
    rank, step, item   the part (computing_us, free_us, ...) or the op name and field (hcom_x/elapse_ms)
    perfbench          what perfbench reports (step_breakdown / comm_ops)
    msprof_analyze     what msprof-analyze wrote
    diff               perfbench - msprof_analyze
    rel_diff           breakdown: diff / step time; communication: diff / msprof-analyze's value
    source             the msprof-analyze folder compared with

msprof-analyze copies each rank's step_trace_time.csv and communication.json, so on an unchanged
folder every difference is ~0; a large one means the cluster output belongs to another run (or the
rank folders were changed after it was made).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Output
from analyzers.schema import BREAKDOWN_PARTS

BREAKDOWN_COLUMNS = tuple(f"{p}_us" for p in BREAKDOWN_PARTS) + ("stage_us",)
COMM_FIELDS = ("elapse_ms", "transit_ms", "wait_ms", "synchronization_ms", "idle_ms")
COLUMNS = ["kind", "rank", "step", "item", "perfbench", "msprof_analyze", "diff", "rel_diff", "source"]


def cluster_check(step_breakdown: pd.DataFrame | None, comm_ops: pd.DataFrame | None, cluster: dict) -> pd.DataFrame:
    rows = []
    src = cluster.get("path")
    ref = cluster.get("reference_breakdown")
    if ref is not None and len(ref) and step_breakdown is not None and len(step_breakdown):
        m = step_breakdown.merge(ref, on=["rank", "step"], suffixes=("", "_ms"))
        for part in BREAKDOWN_COLUMNS:
            if part not in ref.columns or part not in step_breakdown.columns:
                continue
            a = pd.to_numeric(m[part], errors="coerce")
            b = pd.to_numeric(m[f"{part}_ms"], errors="coerce")
            step = pd.to_numeric(m["step_us"], errors="coerce")
            rows.append(
                pd.DataFrame(
                    {
                        "kind": "breakdown",
                        "rank": m["rank"],
                        "step": m["step"],
                        "item": part,
                        "perfbench": a,
                        "msprof_analyze": b,
                        "diff": a - b,
                        "rel_diff": (a - b) / step.where(step > 0),
                    }
                )
            )
    theirs = cluster.get("comm_ops")
    if theirs is not None and len(theirs) and comm_ops is not None and len(comm_ops):
        keys = ["rank", "step", "op_name"]
        t = theirs.copy()
        t["step"] = t["step"].astype("Int64")
        o = comm_ops.copy()
        o["step"] = o["step"].astype("Int64")
        m = o.merge(t[keys + [f for f in COMM_FIELDS if f in t.columns]], on=keys, suffixes=("", "_ms"))
        for f in COMM_FIELDS:
            if f not in t.columns or f not in o.columns:
                continue
            a = pd.to_numeric(m[f], errors="coerce")
            b = pd.to_numeric(m[f"{f}_ms"], errors="coerce")
            rows.append(
                pd.DataFrame(
                    {
                        "kind": "communication",
                        "rank": m["rank"],
                        "step": m["step"],
                        "item": m["op_name"] + "/" + f,
                        "perfbench": a,
                        "msprof_analyze": b,
                        "diff": a - b,
                        "rel_diff": ((a - b) / b.abs()).where(b.abs() > 0, np.where((a - b).abs() > 0, np.inf, 0.0)),
                    }
                )
            )
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(rows, ignore_index=True)
    out["source"] = src
    return out[COLUMNS]


def analysis(ctx):
    """Registry entry `cluster_check` (runs only when msprof-analyze output sat beside the ranks)."""
    cluster = (ctx.profile.meta or {}).get("cluster_output") if ctx.profile is not None else None
    if not cluster:
        return Output()
    return Output(tables={"cluster_check": cluster_check(ctx.table("step_breakdown"), ctx.table("comm_ops"), cluster)})
