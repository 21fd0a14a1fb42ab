"""Parser for msprof output: the summary folder `mindstudio_profiler_output/` (sets J, K, L) and the
older per-iteration timeline export `PROF_*/device_N/timeline/*.json` (set F).

`mindstudio_profiler_output/` (newest export of each kind; `_slice_N` parts concatenated):

- `op_summary_*.csv`: ops (one row per task; `Block Dim`/`Block Num` -> `block_dim`, all other columns kept);
  communication tasks also become comm_ops
- `task_time_*.csv`: ops when there is no op_summary
- `msprof_*.json`: ops (Ascend Hardware tasks) when there is neither; steps from `Iteration Time` events
- `step_trace_*.csv`: steps and the reference breakdown (iteration time, FP-BP, refresh, data-aug bound)
- `op_statistic_*`, `communication_statistic_*`, `api_statistic_*`: `meta` (records)

`device_N/timeline/` (one file per kind and iteration: `{kind}_{dev}_{model}_{iter}.json`):

- `step_trace_*`: steps (`Iteration N` events; step N = end of iteration N-1 to end of iteration N) and reference
  breakdown (FP_BP Time, Iteration Refresh, Data Aug Bound = the gap)
- `task_time_*`: ops of iteration `iter` (HCCL sub-tasks: category `communication_task`)
- `hccl_*`: comm_ops (the `Communication Kernel` op; wait = Notify_Wait on plane 0, transit = data tasks on plane 0,
  size = bytes this rank moved), links (src->dst per link type) and comm_bandwidth
- `msprof_*`: ops when there is no task_time; its Overlap Analysis events -> the reference breakdown (computing,
  communication, not overlapped, free)

Missing kinds are `Profile.warnings` naming the file pattern; `ranks.inputs` lists the kinds read.
The rank is `rank_id` of `device_N/info.json.N` when it is >= 0, else the device id.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analyzers.parsers.msprof.common import rate_table
from analyzers.parsers.msprof.files import OUT_DIR, find_units, has_devices, timeline_dir
from analyzers.parsers.msprof.summary import parse_summary_dir
from analyzers.parsers.msprof.timeline import parse_timeline_dev
from analyzers.schema import (
    COMM_BANDWIDTH,
    COMM_OPS,
    LINKS,
    OPS,
    RANKS,
    STEP_BREAKDOWN,
    STEPS,
    Profile,
    conform,
    empty,
    step_of,
)
from perfbench.errors import ProfileFormatError

SOURCE = "msprof"


def parse(path) -> Profile:
    """Parse msprof output under `path` (a PROF_* folder, its mindstudio_profiler_output/, a device_N
    folder, or a folder holding several of them) into one Profile."""
    path = Path(path)
    if not path.exists():
        raise ProfileFormatError(path, "no such file or directory")
    if path.is_file():
        path = path.parent
    units = find_units(path)
    if not units:
        raise ProfileFormatError(path, "no msprof output (mindstudio_profiler_output/ or device_N/timeline/) found")
    parts, dirs = [], []
    for u in units:
        if u.name == OUT_DIR:
            parts.append(
                parse_summary_dir(u, u.parent if (u.parent / OUT_DIR) == u and has_devices(u.parent) else None)
            )
            dirs.append(u)
        elif (u / OUT_DIR).is_dir():
            parts.append(parse_summary_dir(u / OUT_DIR, u))
            dirs.append(u)
        elif u.name.startswith("device_"):
            parts.append(parse_timeline_dev(u))
            dirs.append(u)
        else:
            for d in sorted(c for c in u.iterdir() if c.is_dir() and c.name.startswith("device_") and timeline_dir(c)):
                parts.append(parse_timeline_dev(d))
                dirs.append(d)
    seen = {}
    for p, u in zip(parts, dirs):
        if p["rank"] in seen:
            raise ProfileFormatError(
                path, f"rank {p['rank']} appears twice ({seen[p['rank']]} and {u}); point at one run"
            )
        seen[p["rank"]] = u
    return _assemble(path, parts, dirs)


def _assemble(path: Path, parts: list[dict], units: list[Path]) -> Profile:
    steps = pd.DataFrame([s for p in parts for s in p["steps"]])
    steps = conform(steps, STEPS) if len(steps) else empty(STEPS)
    ops_l = [p["ops"] for p in parts if p["ops"] is not None and len(p["ops"])]
    ops = pd.concat(ops_l, ignore_index=True) if ops_l else empty(OPS)
    if len(ops):
        if "step" not in ops.columns or ops["step"].isna().all():
            ops["step"] = step_of(ops, steps)
        ops = conform(ops, OPS)
    comm = pd.DataFrame([c for p in parts for c in p["comm"]])
    if len(comm):
        if "step" not in comm.columns:
            comm["step"] = step_of(comm, steps)
        comm = conform(comm, COMM_OPS)
    else:
        comm = empty(COMM_OPS)
    links = rate_table([x for p in parts for x in p["links"]], LINKS)
    bw = rate_table([x for p in parts for x in p["bw"]], COMM_BANDWIDTH)
    ref = pd.DataFrame([r for p in parts for r in p["ref"]])
    ref = conform(ref, STEP_BREAKDOWN) if len(ref) else None
    ranks = conform(
        pd.DataFrame(
            [
                {
                    "rank": p["rank"],
                    "device": p["device"],
                    "path": str(u),
                    "host": (p["meta"].get("device_info") or {}).get("hostname"),
                }
                for p, u in zip(parts, units)
            ]
        ),
        RANKS,
    )
    ranks["inputs"] = [
        ", ".join(p.get("inputs") or [Path(f).name for fs in p["meta"].get("files", {}).values() for f in fs])
        for p in parts
    ]
    meta = {"producer": "msprof", "rank_meta": {str(p["rank"]): p["meta"] for p in parts}}
    dinfo = next((p["meta"].get("device_info") for p in parts if p["meta"].get("device_info")), None)
    if dinfo and dinfo.get("npu"):
        meta["npu"] = dinfo["npu"]
    prof = Profile(
        source=SOURCE,
        path=str(path),
        ranks=ranks,
        steps=steps,
        ops=ops,
        comm_ops=comm,
        comm_bandwidth=bw,
        links=links,
        reference_breakdown=ref,
        meta=meta,
    )
    prof.warnings = [w for p in parts for w in p.get("warnings", [])]  # Profile.warnings
    return prof
