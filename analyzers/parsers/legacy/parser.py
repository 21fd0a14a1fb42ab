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
holding loose legacy files and msprof jobs (PROF_*) below reads both (`_with_msprof_below`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.groups import groups_from_strategy
from analyzers.parsers.msprof.common import comm_op_type, link_rows, op_type_from_name
from analyzers.parsers.msprof.csvread import read_table, to_number, to_numbers
from analyzers.parsers.msprof.parser import _units as msprof_units
from analyzers.parsers.msprof.parser import parse as msprof_parse
from analyzers.schema import (
    COMM_BANDWIDTH,
    COMM_OPS,
    LINKS,
    OPS,
    RANKS,
    STEP_BREAKDOWN,
    STEPS,
    Profile,
    bandwidth_gbps,
    conform,
    empty,
    step_of,
)
from perfbench.errors import ProfileFormatError

SOURCE = "mindspore-legacy"
TICK_US = 0.01  # step_trace_raw timestamps are 10 ns ticks

PATTERNS = {
    "step_trace": re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$"),
    "hccl": re.compile(r"^hccl_raw_(\d+)\.csv$"),
    "pipeline": re.compile(r"^ascend_cluster_analyse_([a-z_-]+?)_(\d+)_(\d+)_(\d+)\.csv$"),
    "timeline": re.compile(r"^output_timeline_data_(\d+)\.txt$"),
    "framework": re.compile(r"^framework_raw_(\d+)\.csv$"),
    "profiler_info": re.compile(r"^profiler_info_(\d+)\.json$"),
    "strategy": re.compile(r"^parallel_strategy_(\d+)\.json$"),
    "flops": re.compile(r"^flops_summary_(\d+)\.json$"),
}
#: file kinds that make a folder a legacy profile on their own
PRIMARY = ("step_trace", "hccl", "pipeline", "timeline")
MAX_DEPTH = 4


def _scan(path: Path, deep: bool = True) -> dict[str, dict[int, Path]]:
    """Legacy files in `path` itself; with `deep` and none there, in its sub-folders (up to MAX_DEPTH)."""
    found: dict[str, dict[int, Path]] = {k: {} for k in PATTERNS}
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.iterdir() if p.is_file())
        if deep and not any(any(PATTERNS[k].match(p.name) for k in PRIMARY) for p in files):
            base = len(path.parts)
            deeper = [p for p in sorted(path.rglob("*")) if len(p.parts) - base <= MAX_DEPTH and p.is_file()]
            dirs = sorted({p.parent for p in deeper if any(PATTERNS[k].match(p.name) for k in PRIMARY)})
            if len(dirs) > 1:
                raise ProfileFormatError(
                    path,
                    f"{len(dirs)} legacy profiler folders below ({', '.join(str(d) for d in dirs[:4])}"
                    f"{' ...' if len(dirs) > 4 else ''}): point at one, or use load_profile",
                )
            files = sorted(p for p in dirs[0].iterdir() if p.is_file()) if dirs else []
    for p in files:
        for kind, rx in PATTERNS.items():
            m = rx.match(p.name)
            if m:
                rank = int(m.group(m.lastindex))
                found[kind].setdefault(rank, p)
    return found


def detect(path) -> bool:
    """True if the folder `path` itself holds legacy MindSpore profiler files."""
    path = Path(path)
    if not path.is_dir():
        return False
    found = _scan(path, deep=False)  # load_profile walks folders itself: look at this one only
    return any(found[k] for k in PRIMARY)


# ---- step_trace_raw -------------------------------------------------------------------------

STEP_TRACE_REQUIRED = ["step_num", "start_point", "end_point", "total"]
STEP_TRACE_OPTIONAL = ["fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]


def _read_step_trace(path: Path, rank: int):
    df = read_table(path, STEP_TRACE_REQUIRED, what="step_trace_raw CSV")
    df = df[df["step_num"] != "-"]
    step = to_number(df["step_num"], path=path, column="step_num", strict=True)
    # convert only the columns used: the fixed ones and the triples of communication ops
    names = [c[: -len("_start_point")] for c in df.columns if c.endswith("_start_point")]
    names = [n for n in names if n not in ("", "fp", "bp", "start", "end") and comm_op_type(n)]
    wanted = set(STEP_TRACE_REQUIRED + STEP_TRACE_OPTIONAL) - {"step_num"}
    for n in names:
        wanted |= {n, f"{n}_start_point", f"{n}_end_point"}
    num = to_numbers(df, [c for c in df.columns if c in wanted], path=path, strict=STEP_TRACE_REQUIRED)
    steps = pd.DataFrame(
        {
            "rank": rank,
            "step": step.astype("int64"),
            "start_us": num["start_point"] * TICK_US,
            "end_us": num["end_point"] * TICK_US,
        }
    )
    ref = pd.DataFrame(
        {
            "rank": rank,
            "step": step.astype("int64"),
            "step_us": num["total"] * TICK_US,
        }
    )
    for c in STEP_TRACE_OPTIONAL:
        if c in num and c not in ("fp_point", "bp_point"):
            ref[f"{c}_us"] = num[c] * TICK_US
    # per-op triples: NAME, NAME_start_point, NAME_end_point (any order)
    cols: dict[str, list] = {"op_name": [], "op_type": [], "start_us": [], "elapse_ms": [], "step": []}
    step_arr = step.astype("int64").to_numpy()
    for name in names:  # stream_N_parallel_M columns and non-communication ops are not in `names`
        s_col, e_col = f"{name}_start_point", f"{name}_end_point"
        if e_col not in num:
            raise ProfileFormatError(path, f"column {e_col!r} is missing (its {s_col!r} is present)")
        st, en = num[s_col].to_numpy() * TICK_US, num[e_col].to_numpy() * TICK_US
        dur = num[name].to_numpy() * TICK_US if name in num else en - st
        cols["op_name"] += [name] * len(st)
        cols["op_type"] += [comm_op_type(name)] * len(st)
        cols["start_us"].append(st)
        cols["elapse_ms"].append(dur / 1000.0)
        cols["step"].append(step_arr)
    comm = None
    if names:
        comm = pd.DataFrame(
            {
                "rank": rank,
                "step": np.concatenate(cols["step"]),
                "op_name": cols["op_name"],
                "op_type": cols["op_type"],
                "start_us": np.concatenate(cols["start_us"]),
                "elapse_ms": np.concatenate(cols["elapse_ms"]),
            }
        )
    return steps, ref, comm


# ---- hccl_raw --------------------------------------------------------------------------------


def _json_cell(path: Path, text: str, column: str, line: int):
    if text in ("", "{}"):
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"line {line}: column {column!r} is not valid JSON ({exc.msg})") from None


def _link_entries(path, info, line, what):
    """{"src-dst": {"SDMA": [time_ms, size_KB, bw, (wait)]}} -> list of (src, dst, transport, time_ms, size_mb)."""
    out = []
    if not isinstance(info, dict):
        raise ProfileFormatError(path, f"line {line}: {what} is not a JSON object")
    for key, per in info.items():
        m = re.match(r"^\s*(\d+)\s*-\s*(\d+)\s*$", str(key))
        if not m or not isinstance(per, dict):
            raise ProfileFormatError(path, f"line {line}: {what} key {key!r} is not 'src-dst'")
        for transport, vals in per.items():
            if not isinstance(vals, list) or len(vals) < 2:
                raise ProfileFormatError(path, f"line {line}: {what}[{key}][{transport}] is not [time, size, ...]")
            try:
                t_ms, size_kb = float(vals[0]), float(vals[1])
            except (TypeError, ValueError):
                raise ProfileFormatError(
                    path, f"line {line}: {what}[{key}][{transport}] has non-numeric values"
                ) from None
            out.append((int(m.group(1)), int(m.group(2)), str(transport).upper(), t_ms, size_kb / 1000.0))
    return out


def _read_hccl(path: Path, rank: int):
    df = read_table(
        path,
        ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"],
        what="hccl_raw CSV",
    )
    comm, links, bw = [], [], []
    for i, r in enumerate(df.itertuples(index=False), start=2):
        if r.step_num == "-":
            continue  # average row
        try:
            step = int(r.step_num)
        except ValueError:
            raise ProfileFormatError(path, f"line {i}: step_num {r.step_num!r} is not an integer") from None
        # per-step link totals: only validated (the per-op links below carry the same data, per op)
        _link_entries(path, _json_cell(path, r.link_info, "link_info", i), i, "link_info")
        ops = _json_cell(path, r.communication_operator_cost, "communication_operator_cost", i)
        if not isinstance(ops, dict):
            raise ProfileFormatError(path, f"line {i}: communication_operator_cost is not a JSON object")
        for op_name, v in ops.items():
            if not isinstance(v, list) or len(v) < 3:
                raise ProfileFormatError(path, f"line {i}: operator {op_name!r} is not [step, cost, wait, links]")
            try:
                cost, wait = float(v[1]), float(v[2])
            except (TypeError, ValueError):
                raise ProfileFormatError(path, f"line {i}: operator {op_name!r} has non-numeric cost/wait") from None
            entries = _link_entries(path, v[3] if len(v) > 3 else {}, i, f"{op_name} links")
            op_links, per_tr, payload_mb, group_size = link_rows(
                (src, dst, tr, mb, t_ms) for src, dst, tr, t_ms, mb in entries
            )
            comm.append(
                {
                    "rank": rank,
                    "step": step,
                    "op_name": op_name,
                    "op_type": comm_op_type(op_name) or "",
                    "transit_ms": cost,
                    "wait_ms": wait,
                    "elapse_ms": cost + wait,
                    "size_bytes": payload_mb * 1e6 if entries else np.nan,
                    "group_size": group_size,
                }
            )
            for lk in op_links:
                links.append({"step": step, "op_name": op_name, **lk, "rank": rank})
            for tr, (mb, t_ms) in per_tr.items():
                bw.append(
                    {"rank": rank, "step": step, "op_name": op_name, "transport": tr, "size_mb": mb, "time_ms": t_ms}
                )
    return comm, links, bw


# ---- the rest ------------------------------------------------------------------------------------


def _read_pipeline(path: Path, rank: int) -> pd.DataFrame:
    """One row per step, in step order; MindSpore appends the mean over steps as the last row when
    there is more than one step: that row is dropped. computation_time is MindSpore's
    step - communication alone (so it holds the step's idle time too)."""
    cols = ["computation_time", "communication_alone_time"]
    opt = ["stage_time", "receive_alone_time", "collective_communication_alone_time"]
    df = read_table(path, cols, numeric=cols + opt, what="cluster analyse CSV")
    if len(df) > 1:
        df = df.iloc[:-1]
    out = pd.DataFrame(
        {
            "rank": rank,
            "row": np.arange(1, len(df) + 1),
            "computing_us": df["computation_time"].to_numpy() * 1000.0,
            "communication_not_overlapped_us": df["communication_alone_time"].to_numpy() * 1000.0,
        }
    )
    for src, dst in (
        ("stage_time", "stage_us"),
        ("receive_alone_time", "bubble_us"),
        ("collective_communication_alone_time", "collective_not_overlapped_us"),
    ):
        if src in df.columns:
            out[dst] = df[src].to_numpy() * 1000.0
    return out


def _read_framework(path: Path) -> dict[str, str]:
    df = read_table(path, [], what="framework_raw CSV")
    name_col = next((c for c in ("full_kernel_name", "full_op_name", "op_name") if c in df.columns), None)
    type_col = next((c for c in ("kernel_type", "op_type") if c in df.columns), None)
    if name_col is None or type_col is None:
        raise ProfileFormatError(
            path, "required column 'full_op_name'/'full_kernel_name' or 'op_type'/'kernel_type' is missing"
        )
    return dict(zip(df[name_col], df[type_col]))


def _read_timeline(path: Path, rank: int, types: dict[str, str]) -> pd.DataFrame:
    cols = ["op_name", "stream_id", "start_time(ms)", "duration(ms)"]
    df = read_table(path, cols, numeric=["start_time(ms)", "duration(ms)"], what="output_timeline_data file")
    names = df["op_name"]
    typ = names.map(lambda n: types.get(n) or op_type_from_name(n))
    comm = names.map(comm_op_type)
    return pd.DataFrame(
        {
            "rank": rank,
            "name": names,
            "type": typ,
            "category": np.where(comm.notna(), "communication", "compute"),
            "start_us": df["start_time(ms)"] * 1000.0,
            "dur_us": df["duration(ms)"] * 1000.0,
            "stream": df["stream_id"],
            "core_type": pd.NA,
        }
    )


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
    except ValueError as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({exc})") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    if not isinstance(d, dict):
        raise ProfileFormatError(path, "expected a JSON object")
    return d


def parse(path) -> Profile:
    """Parse every legacy MindSpore profiler file under `path` into one Profile (one rank per file suffix)."""
    path = Path(path)
    if not path.exists():
        raise ProfileFormatError(path, "no such file or directory")
    found = _scan(path)
    if not any(found[k] for k in PRIMARY):
        raise ProfileFormatError(
            path, "no legacy MindSpore profiler files (step_trace_raw_*, hccl_raw_*, output_timeline_data_*) found"
        )
    ranks = sorted(set().union(*[set(found[k]) for k in PRIMARY]))
    meta: dict = {"format": "MindSpore 1.x profiler/", "files": {}}
    steps_l, ref_l, comm_l, links_l, bw_l, ops_l, pipe_l = [], [], [], [], [], [], []
    stage_of: dict[int, int] = {}
    world = None
    for kind in PATTERNS:
        meta["files"][kind] = {str(r): str(p) for r, p in found[kind].items()}

    # pipeline layout: ascend_cluster_analyse_pipeline-parallel_{stages}_{ranks}_{rank}.csv
    for rank, p in found["pipeline"].items():
        m = PATTERNS["pipeline"].match(p.name)
        mode, stages, world = m.group(1), int(m.group(2)), int(m.group(3))
        meta["parallel_mode"] = mode
        if mode == "pipeline-parallel" and stages >= 1:
            meta["stage_num"] = stages
        pipe_l.append(_read_pipeline(p, rank))
    if meta.get("stage_num") and world:
        # the layout is the cluster's: MindSpore numbers pipeline stages by consecutive blocks of
        # world / stages ranks, also for a rank whose own cluster file is missing
        per_stage = max(world // meta["stage_num"], 1)
        for rank in ranks:
            if rank < world:
                stage_of[rank] = rank // per_stage
    for rank, p in found["profiler_info"].items():
        info = _read_json(p)
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
        cfg = _read_json(p).get("config", {})
        if isinstance(cfg, dict) and cfg.get("stageId") is not None:
            stage_of.setdefault(int(cfg.get("rankId", rank)), int(cfg["stageId"]))
    for rank, p in found["flops"].items():
        meta.setdefault("flops", {})[str(rank)] = _read_json(p)

    for rank in ranks:
        if rank in found["step_trace"]:
            st, ref, comm_t = _read_step_trace(found["step_trace"][rank], rank)
            steps_l.append(st)
            ref_l.append(ref)
            if comm_t is not None:
                comm_l.append(("trace", comm_t))
        if rank in found["hccl"]:
            c, li, b = _read_hccl(found["hccl"][rank], rank)
            if c:
                comm_l.append(("hccl", pd.DataFrame(c)))
            links_l += li
            bw_l += b
        if rank in found["timeline"]:
            fw = found["framework"].get(rank)
            types = _read_framework(fw) if fw else {}
            ops_l.append(_read_timeline(found["timeline"][rank], rank, types))

    steps = pd.concat(steps_l, ignore_index=True) if steps_l else empty(STEPS)

    # comm ops: hccl_raw gives cost/wait/size; step_trace gives start/duration -> merge on (rank, step, op)
    trace = (
        pd.concat([d for k, d in comm_l if k == "trace"], ignore_index=True)
        if any(k == "trace" for k, _ in comm_l)
        else None
    )
    hccl = (
        pd.concat([d for k, d in comm_l if k == "hccl"], ignore_index=True)
        if any(k == "hccl" for k, _ in comm_l)
        else None
    )
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
    if comm is not None:
        # 'stream_36_0_AllReduce-op4542' -> 'AllReduce-op4542': stream ids differ between ranks
        # running the same graph, the op name does not (it is what matches collectives across ranks)
        comm["stream_op"] = comm["op_name"]
        comm["op_name"] = comm["op_name"].map(_short_op)
        comm["group"] = comm["rank"].map(lambda r: _group_label(r, stage_of)) if stage_of else ""
        p2p = comm["op_type"].isin(["send", "recv"])
        comm.loc[p2p, "group"] = "p2p"
        gs = comm["group_size"] if "group_size" in comm.columns else pd.Series(np.nan, index=comm.index)
        comm["group_size"] = gs.astype("Float64").mask(p2p, 2)  # point to point: two ranks
        comm = conform(comm, COMM_OPS).sort_values(["rank", "step", "start_us"], kind="stable").reset_index(drop=True)
    else:
        comm = empty(COMM_OPS)

    ref = _reference(ref_l, pipe_l)

    ops = pd.concat(ops_l, ignore_index=True) if ops_l else empty(OPS)
    if len(ops):
        if "step" not in ops.columns:
            ops["step"] = pd.NA
        missing = ops["step"].isna()
        if missing.any():
            ops.loc[missing, "step"] = step_of(ops[missing], steps)
        ops = conform(ops, OPS)
    for rows in (links_l, bw_l):
        for r in rows:
            r["op_name"] = _short_op(r["op_name"])
    links = conform(pd.DataFrame(links_l), LINKS) if links_l else empty(LINKS)
    if len(links):
        links["group"] = links["rank"].map(lambda r: _group_label(r, stage_of)) if stage_of else ""
        links["bandwidth_gbps"] = bandwidth_gbps(links["size_mb"], links["time_ms"])
        meta["links_note"] = "src/dst are ranks inside the communication group (as HCCL reports them)"
    bw = conform(pd.DataFrame(bw_l), COMM_BANDWIDTH) if bw_l else empty(COMM_BANDWIDTH)
    if len(bw):
        bw["bandwidth_gbps"] = bandwidth_gbps(bw["size_mb"], bw["time_ms"])

    rank_rows = []
    for r in ranks:
        p = found["step_trace"].get(r) or found["hccl"].get(r) or found["timeline"].get(r) or found["pipeline"].get(r)
        rank_rows.append(
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
    if stage_of:
        meta["stage_of_rank"] = {str(k): v for k, v in stage_of.items()}
    prof = Profile(
        source=SOURCE,
        path=str(path),
        ranks=conform(pd.DataFrame(rank_rows), RANKS),
        steps=conform(steps, STEPS),
        ops=ops,
        comm_ops=comm,
        comm_bandwidth=bw,
        links=links,
        reference_breakdown=ref,
        meta=meta,
    )
    prof.warnings = _missing_files(found, ranks, trace)  # Profile.warnings
    if path.is_dir() and any(_is_primary(f.name) for f in path.iterdir() if f.is_file()):
        # MindSpore writes its parsed files next to the raw msprof job (PROF_*) they came from; a
        # folder may also collect several runs: read both, never lose one silently
        prof = _with_msprof_below(prof, path)
    return prof


#: file kinds whose content ends up in the Profile (RANKS.inputs lists them per rank)
USED_KINDS = ("step_trace", "hccl", "pipeline", "timeline", "framework", "profiler_info", "strategy")
#: what a rank loses without each kind, and the file name MindSpore gives it
_LOST = {
    "step_trace": ("step_trace_raw_{r}_detail_time.csv", "its step times and the profiler's step trace are unknown"),
    "hccl": ("hccl_raw_{r}.csv", "its collectives' wait/transit split, sizes and links are unknown"),
    "pipeline": ("ascend_cluster_analyse_*_{r}.csv", "the profiler's computation / communication split is unknown"),
    "timeline": ("output_timeline_data_{r}.txt", "it has no op data (computing recomputation impossible)"),
}


def _missing_files(found: dict, ranks: list[int], trace: pd.DataFrame | None) -> list[str]:
    """A warning per rank that lacks a file kind other ranks of the same folder have (or, for
    hccl_raw, whose step trace shows collectives), naming the missing file."""
    out = []
    for kind, (pattern, lost) in _LOST.items():
        have = set(found[kind])
        for r in ranks:
            if r in have:
                continue
            evidence = sorted(have)
            if kind == "hccl" and trace is not None and (trace["rank"] == r).any():
                evidence = evidence or ["its step trace lists collectives"]
            if kind == "timeline" and r in found["framework"]:
                evidence = evidence or [f"{found['framework'][r].name} is there"]
            if not evidence:
                continue
            others = ", ".join(map(str, evidence[:6])) + (" ..." if len(evidence) > 6 else "")
            why = f"ranks {others} have theirs" if evidence and isinstance(evidence[0], int) else evidence[0]
            out.append(f"rank {r}: {pattern.format(r=r)} is missing ({why}): {lost}")
    return out


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


def _is_primary(name: str) -> bool:
    return any(PATTERNS[k].match(name) for k in PRIMARY)


def _richness(p: Profile, rank: int) -> tuple:
    """What a Profile holds for one rank: (op data, collectives, step windows, profiler breakdown)."""

    def has(df):
        return df is not None and len(df) and bool((df["rank"] == rank).any())

    return (has(p.ops), has(p.comm_ops), has(p.steps), has(p.reference_breakdown))


_WHAT = ("op data", "collectives", "step windows", "the profiler's breakdown")


def _with_msprof_below(legacy: Profile, path: Path) -> Profile:
    """`legacy` plus the msprof jobs (PROF_*) below `path`. A rank found in both keeps the richer
    source (op data first, then collectives, steps, breakdown; msprof on a tie) and a warning names the
    files not used; every other rank of either source is kept."""

    if not msprof_units(path):
        return legacy
    try:
        mp = msprof_parse(path)
    except ProfileFormatError as exc:  # the loose files are still good: keep them, say what was lost
        legacy.warnings = list(getattr(legacy, "warnings", [])) + [
            f"{exc.path}: {exc.problem} (the msprof jobs under {path} are not read; its legacy files are)"
        ]
        return legacy
    warnings = list(getattr(legacy, "warnings", [])) + list(getattr(mp, "warnings", []))
    lr, mr = set(legacy.ranks["rank"].astype(int)), set(mp.ranks["rank"].astype(int))
    keep_legacy = set(lr)
    for r in sorted(lr & mr):
        a, b = _richness(legacy, r), _richness(mp, r)
        if a > b:
            lost, used = mp, legacy
        else:
            (
                lost,
                used,
            ) = legacy, mp
            keep_legacy.discard(r)
        lost_files = lost.ranks.loc[lost.ranks["rank"] == r, "inputs"].iloc[0] if "inputs" in lost.ranks else ""
        used_what = ", ".join(w for w, h in zip(_WHAT, _richness(used, r)) if h) or "nothing more"
        warnings.append(
            f"rank {r}: two profiler outputs under {path} hold rank {r}: "
            f"{'the msprof job' if used is mp else 'the MindSpore legacy files'} ({used_what}) is used, "
            f"{lost_files or 'the other'} ({'legacy' if lost is legacy else 'msprof'}) is not "
            "(point at the folder of the one you want to read it alone)"
        )
    keep_msprof = mr - (lr & keep_legacy)
    out = Profile(source=f"{SOURCE}+{mp.source}", path=str(path))
    for name in ("ranks", "steps", "ops", "comm_ops", "comm_bandwidth", "links"):
        parts = []
        for p, keep in ((legacy, keep_legacy), (mp, keep_msprof)):
            df = getattr(p, name)
            if df is None or not len(df):
                continue
            sel = df["rank"].isin(keep) if "rank" in df.columns else pd.Series(True, index=df.index)
            if name == "links" and "rank" not in df.columns:
                sel = pd.Series(bool(keep), index=df.index)
            parts.append(df[sel])
        frames = [f for f in parts if len(f)]
        if frames:
            setattr(out, name, pd.concat(frames, ignore_index=True))
    refs = []
    for p, keep in ((legacy, keep_legacy), (mp, keep_msprof)):
        ref = p.reference_breakdown
        if ref is not None and len(ref):
            refs.append(ref[ref["rank"].isin(keep)])
    refs = [r for r in refs if len(r)]
    out.reference_breakdown = pd.concat(refs, ignore_index=True) if refs else None
    out.meta = {
        **legacy.meta,
        "formats": [SOURCE, mp.source],
        "msprof": mp.meta,
        "rank_source": {**{str(r): SOURCE for r in keep_legacy}, **{str(r): mp.source for r in keep_msprof}},
    }
    for k in ("producer", "npu"):
        if k in mp.meta:
            out.meta[k] = mp.meta[k]
    out.warnings = warnings
    return out
