"""Parser for the legacy MindSpore (1.x) `profiler/` folder (fixture sets G, H, I).

Files read (rank R = the number in the file name):

- `step_trace_raw_{R}_detail_time.csv`: steps (start/end), reference breakdown (iteration_interval, fp_and_bp, tail),
  timing of every HCCL op column (`NAME`, `NAME_start_point`, `NAME_end_point`, any order; `stream_N_parallel_M` stream
  columns are skipped). Times are 10 ns ticks. The final average row (`step_num` = `-`) is dropped.
- `hccl_raw_{R}.csv`: comm_ops (per step and op: cost = transit, wait), links and comm_bandwidth from the JSON embedded
  in `link_info` / `communication_operator_cost` (`{"src-dst": {"SDMA": [time_ms, size_KB, bw_KB/s]}}`).
- `ascend_cluster_analyse_{mode}_{S}_{N}_{R}.csv`: per step (last row = MindSpore's mean, dropped): computation,
  communication alone, stage and receive-alone time (ms) -> reference breakdown `computing_us`,
  `communication_not_overlapped_us`, `stage_us`, `bubble_us`; a pipeline-parallel layout (S stages, N ranks) gives every
  rank its stage.
- `output_timeline_data_{R}.txt`: ops (name, stream, start, duration; ms) with op types from `framework_raw_{R}.csv`
- `profiler_info_{R}.json`, `parallel_strategy_{R}.json`: rank_size, stage_num, parallel_mode, stageId
- `flops_summary_{R}.json`: meta

Units: step-trace ticks / 100 = us; hccl_raw and pipeline times are ms.

No ops are invented: a rank without an op timeline has no `ops` (its breakdown is the profiler's or
unknown). Missing files are `Profile.warnings` naming them; `ranks.inputs` names the files read. A folder
holding loose legacy files and msprof jobs (PROF_*) below reads both (`with_msprof.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.groups import groups_from_strategy
from analyzers.parsers.legacy.files import PATTERNS, PRIMARY, USED_KINDS, is_primary, missing_files, scan
from analyzers.parsers.legacy.readers import (
    read_framework,
    read_hccl,
    read_pipeline,
    read_step_trace,
    read_timeline,
)
from analyzers.parsers.legacy.with_msprof import with_msprof_below
from analyzers.parsers.msprof.common import comm_op_type, rate_table
from analyzers.parsers.msprof.files import read_json_dict
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

SOURCE = "mindspore-legacy"


def parse(path) -> Profile:
    """Parse every legacy MindSpore profiler file under `path` into one Profile (one rank per file suffix)."""
    path = Path(path)
    if not path.exists():
        raise ProfileFormatError(path, "no such file or directory")
    found = scan(path)
    if not any(found[k] for k in PRIMARY):
        raise ProfileFormatError(
            path, "no legacy MindSpore profiler files (step_trace_raw_*, hccl_raw_*, output_timeline_data_*) found"
        )
    ranks = sorted(set().union(*[set(found[k]) for k in PRIMARY]))
    meta: dict = {"format": "MindSpore 1.x profiler/", "files": {}}
    for kind in PATTERNS:
        meta["files"][kind] = {str(r): str(p) for r, p in found[kind].items()}
    pipe_l, stage_of, world = _layout(found, ranks, meta)
    t = _read_ranks(found, ranks)
    steps = pd.concat(t["steps"], ignore_index=True) if t["steps"] else empty(STEPS)
    trace = pd.concat(t["trace"], ignore_index=True) if t["trace"] else None
    hccl = pd.concat(t["hccl"], ignore_index=True) if t["hccl"] else None
    links, bw = _link_tables(t["links"], t["bw"], stage_of)
    if len(links):
        meta["links_note"] = "src/dst are ranks inside the communication group (as HCCL reports them)"
    if stage_of:
        meta["stage_of_rank"] = {str(k): v for k, v in stage_of.items()}
    prof = Profile(
        source=SOURCE,
        path=str(path),
        ranks=_rank_table(found, ranks, stage_of, world),
        steps=conform(steps, STEPS),
        ops=_ops_table(t["ops"], steps),
        comm_ops=_comm_table(trace, hccl, stage_of),
        comm_bandwidth=bw,
        links=links,
        reference_breakdown=_reference(t["ref"], pipe_l),
        meta=meta,
    )
    prof.warnings = missing_files(found, ranks, trace)  # Profile.warnings
    if path.is_dir() and any(is_primary(f.name) for f in path.iterdir() if f.is_file()):
        # MindSpore writes its parsed files next to the raw msprof job (PROF_*) they came from; a
        # folder may also collect several runs: read both, never lose one silently
        prof = with_msprof_below(prof, path)
    return prof


def _layout(found: dict, ranks: list[int], meta: dict) -> tuple[list[pd.DataFrame], dict[int, int], int | None]:
    """(the cluster analyse rows of each rank, {rank: pipeline stage}, world size) from the cluster analyse files,
    profiler_info and parallel_strategy; `meta` gets the parallel mode, stage count, groups, profiler info, flops."""
    pipe_l, stage_of, world = [], {}, None
    # pipeline layout: ascend_cluster_analyse_pipeline-parallel_{stages}_{ranks}_{rank}.csv
    for rank, p in found["pipeline"].items():
        m = PATTERNS["pipeline"].match(p.name)
        mode, stages, world = m.group(1), int(m.group(2)), int(m.group(3))
        meta["parallel_mode"] = mode
        if mode == "pipeline-parallel" and stages >= 1:
            meta["stage_num"] = stages
        pipe_l.append(read_pipeline(p, rank))
    if meta.get("stage_num") and world:
        # the layout is the cluster's: MindSpore numbers pipeline stages by consecutive blocks of
        # world / stages ranks, also for a rank whose own cluster file is missing
        per_stage = max(world // meta["stage_num"], 1)
        for rank in ranks:
            if rank < world:
                stage_of[rank] = rank // per_stage
    for rank, p in found["profiler_info"].items():
        info = read_json_dict(p)
        meta.setdefault("profiler_info", {})[str(rank)] = info
        if info.get("rank_size"):
            world = world or int(info["rank_size"])
        if info.get("stage_num"):
            meta.setdefault("stage_num", int(info["stage_num"]))
        if info.get("parallel_mode"):
            meta["parallel_mode"] = info["parallel_mode"]
    if found["strategy"]:  # stageDevices: the devices of each pipeline stage (analyzers.analyses.parallel_groups)
        meta["parallel_groups"] = groups_from_strategy(found["strategy"].values())
    for rank, p in found["strategy"].items():
        cfg = read_json_dict(p).get("config", {})
        if isinstance(cfg, dict) and cfg.get("stageId") is not None:
            stage_of.setdefault(int(cfg.get("rankId", rank)), int(cfg["stageId"]))
    for rank, p in found["flops"].items():
        meta.setdefault("flops", {})[str(rank)] = read_json_dict(p)
    return pipe_l, stage_of, world


def _read_ranks(found: dict, ranks: list[int]) -> dict[str, list]:
    """Every rank's files read, rank by rank: {"steps", "ref", "trace" (step trace collectives), "hccl" (hccl_raw
    collectives), "ops": frames; "links", "bw": rows}."""
    t: dict[str, list] = {k: [] for k in ("steps", "ref", "trace", "hccl", "ops", "links", "bw")}
    for rank in ranks:
        if rank in found["step_trace"]:
            st, ref, comm_t = read_step_trace(found["step_trace"][rank], rank)
            t["steps"].append(st)
            t["ref"].append(ref)
            if comm_t is not None:
                t["trace"].append(comm_t)
        if rank in found["hccl"]:
            c, li, b = read_hccl(found["hccl"][rank], rank)
            if c:
                t["hccl"].append(pd.DataFrame(c))
            t["links"] += li
            t["bw"] += b
        if rank in found["timeline"]:
            fw = found["framework"].get(rank)
            types = read_framework(fw) if fw else {}
            t["ops"].append(read_timeline(found["timeline"][rank], rank, types))
    return t


def _comm_table(trace: pd.DataFrame | None, hccl: pd.DataFrame | None, stage_of: dict) -> pd.DataFrame:
    """comm_ops: hccl_raw gives cost/wait/size, the step trace start/duration -> merged on (rank, step, op)."""
    if trace is not None and hccl is not None:
        comm = hccl.merge(
            trace[["rank", "step", "op_name", "start_us", "elapse_ms"]].rename(
                columns={"elapse_ms": "trace_elapse_ms"}
            ),
            on=["rank", "step", "op_name"],
            how="outer",
        )
        comm["elapse_ms"] = comm["elapse_ms"].fillna(comm["trace_elapse_ms"])
        comm["op_type"] = comm["op_type"].fillna(comm["op_name"].map(comm_op_type))
    else:
        comm = hccl if hccl is not None else trace
    if comm is None:
        return empty(COMM_OPS)
    # 'stream_36_0_AllReduce-op4542' -> 'AllReduce-op4542': stream ids differ between ranks
    # running the same graph, the op name does not (it is what matches collectives across ranks)
    comm["stream_op"] = comm["op_name"]
    comm["op_name"] = comm["op_name"].map(_short_op)
    comm["group"] = comm["rank"].map(lambda r: _group_label(r, stage_of)) if stage_of else ""
    p2p = comm["op_type"].isin(["send", "recv"])
    comm.loc[p2p, "group"] = "p2p"
    gs = comm["group_size"] if "group_size" in comm.columns else pd.Series(np.nan, index=comm.index)
    comm["group_size"] = gs.astype("Float64").mask(p2p, 2)  # point to point: two ranks
    return conform(comm, COMM_OPS).sort_values(["rank", "step", "start_us"], kind="stable").reset_index(drop=True)


def _ops_table(ops_l: list[pd.DataFrame], steps: pd.DataFrame) -> pd.DataFrame:
    """The ranks' op timelines, each op in the step whose window holds it."""
    ops = pd.concat(ops_l, ignore_index=True) if ops_l else empty(OPS)
    if len(ops):
        if "step" not in ops.columns:
            ops["step"] = pd.NA
        missing = ops["step"].isna()
        if missing.any():
            ops.loc[missing, "step"] = step_of(ops[missing], steps)
        ops = conform(ops, OPS)
    return ops


def _link_tables(links_l: list[dict], bw_l: list[dict], stage_of: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(links, comm_bandwidth) of the hccl_raw rows, op names without their stream prefix."""
    for rows in (links_l, bw_l):
        for r in rows:
            r["op_name"] = _short_op(r["op_name"])
    links = rate_table(links_l, LINKS)
    if len(links):
        links["group"] = links["rank"].map(lambda r: _group_label(r, stage_of)) if stage_of else ""
    return links, rate_table(bw_l, COMM_BANDWIDTH)


def _rank_table(found: dict, ranks: list[int], stage_of: dict, world: int | None) -> pd.DataFrame:
    rows = []
    for r in ranks:
        p = found["step_trace"].get(r) or found["hccl"].get(r) or found["timeline"].get(r) or found["pipeline"].get(r)
        rows.append(
            {
                "rank": r,
                "host": pd.NA,
                "device": str(r),
                "path": str(p.parent),
                "stage": stage_of.get(r, pd.NA),
                "dp_group": _group_label(r, stage_of) if stage_of else pd.NA,
                "world_size": world if world else pd.NA,
                "inputs": ", ".join(
                    found[k][r].name
                    for k in USED_KINDS
                    if r in found[k] and (k != "framework" or r in found["timeline"])
                ),
            }
        )
    return conform(pd.DataFrame(rows), RANKS)


def _reference(ref_l: list[pd.DataFrame], pipe_l: list[pd.DataFrame]) -> pd.DataFrame | None:
    """The profiler's own per-step numbers: step_trace_raw (step time, iteration interval, fp+bp, tail)
    joined with the cluster analyse file (row k = the rank's k-th step; a rank without a step trace
    keeps the rows numbered 1..n as MindSpore numbers steps)."""
    if not ref_l and not pipe_l:
        return None
    trace = pd.concat(ref_l, ignore_index=True) if ref_l else pd.DataFrame(columns=["rank", "step"])
    pipe = pd.concat(pipe_l, ignore_index=True) if pipe_l else pd.DataFrame(columns=["rank", "row"])
    trace = trace.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    trace["row"] = trace.groupby("rank").cumcount() + 1
    merged = trace.merge(pipe, on=["rank", "row"], how="left")
    alone = pipe[~pipe["rank"].isin(set(trace["rank"]))].rename(columns={"row": "step"})
    ref = pd.concat([merged.drop(columns="row"), alone], ignore_index=True)
    return conform(ref, STEP_BREAKDOWN)


def _short_op(name: str) -> str:
    return re.sub(r"^stream_\d+_\d+_", "", str(name))


def _group_label(rank, stage_of: dict) -> str:
    s = stage_of.get(int(rank))
    return f"stage{s}" if s is not None else ""
