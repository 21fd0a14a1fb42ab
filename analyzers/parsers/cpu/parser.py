"""Parser for the MindSpore CPU profiler output (MindSpore 2.x, `ProfilerActivity.CPU`).

Per rank and profiling cycle the profiler writes a folder `<host>_<pid>_<time>_ascend_ms/` with
- `FRAMEWORK/cpu_op_execute_timestamp_{rank}.txt`: every op execution, one line per op:
  `full_name;op_kind;start_ns,dur_ms,thread start_ns,dur_ms,thread ...` (start in ns since the epoch)
- `FRAMEWORK/cpu_framework_{rank}.txt`: `Type;Type-opN;graph;input_1:[shape];...` (shapes, no dtypes)
- `ASCEND_PROFILER_OUTPUT/trace_view.json`: the same executions as Chrome-trace `X` events of the
  process named "CPU OP" (ts/dur strings in µs), plus a "Scope Layer" process
The op timeline is read from the timestamp file (exact, compact); trace_view.json is the fallback
when that file is absent. Timestamps are wall-clock (time.time()) microseconds, the same clock as
the workload's step records, so step windows come from `workload_steps` when given; otherwise steps
are recovered from the op sequence (see `infer_steps`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.ascend.common import read_csv
from analyzers.parsers.trace_view import iter_events
from analyzers.schema import MEMORY, STEPS, Profile, conform, conformed_profile, empty, step_of
from perfbench.errors import ProfileFormatError

#: CPU op types that are collectives, and their normalized names
COMM_TYPES = {
    "AllReduce": "allreduce",
    "AllGather": "allgather",
    "ReduceScatter": "reducescatter",
    "Broadcast": "broadcast",
    "AlltoAll": "alltoall",
    "AlltoAllV": "alltoallv",
    "AllToAll": "alltoall",
    "Send": "send",
    "Receive": "recv",
    "Reduce": "reduce",
    "Barrier": "barrier",
    "CollectiveGather": "gather",
    "CollectiveScatter": "scatter",
}
_RANK_FILE = re.compile(r"cpu_op_execute_timestamp_(\d+)\.txt$")
_OP_TYPE = re.compile(r"(?:^|/)([A-Za-z0-9_]+?)-op\d+$")


def is_cpu_profile_dir(path: Path) -> bool:
    return (path / "FRAMEWORK").is_dir() and any((path / "FRAMEWORK").glob("cpu_op_*"))


def find_rank_dirs(root: Path) -> list[Path]:
    """Every `*_ascend_ms`-style folder holding CPU profiler FRAMEWORK files, below or at root."""
    root = Path(root)
    if is_cpu_profile_dir(root):
        return [root]
    return sorted({p.parent.parent for p in root.rglob("FRAMEWORK/cpu_op_*") if is_cpu_profile_dir(p.parent.parent)})


def rank_of(rank_dir: Path) -> int:
    for f in (rank_dir / "FRAMEWORK").glob("cpu_op_*"):
        m = re.search(r"_(\d+)\.(txt|csv)$", f.name)
        if m:
            return int(m.group(1))
    raise ProfileFormatError(rank_dir / "FRAMEWORK", "no cpu_op_*_{rank} file to tell the rank from")


def op_type(name: str, kind: str | None = None) -> str:
    m = _OP_TYPE.search(name)
    if m:
        return m.group(1)
    return name.rsplit("/", 1)[-1].split("-")[0]


def read_timestamps(path: Path, rank: int) -> pd.DataFrame:
    names, starts, durs, threads = [], [], [], []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileFormatError(path, f"cannot read ({exc})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(";")
        if len(parts) < 3:
            raise ProfileFormatError(
                path, f"line {lineno}: expected `name;kind;start,dur,thread ...`, got {line[:80]!r}"
            )
        name, samples = parts[0], parts[2].split()
        for s in samples:
            fields = s.split(",")
            try:
                start_ns, dur_ms = int(fields[0]), float(fields[1])
                thread = fields[2] if len(fields) > 2 else "0"
            except (ValueError, IndexError):
                raise ProfileFormatError(
                    path, f"line {lineno}: bad execution record {s!r} (expected start_ns,dur_ms,thread)"
                ) from None
            names.append(name)
            starts.append(start_ns / 1000.0)
            durs.append(dur_ms * 1000.0)
            threads.append(thread)
    df = pd.DataFrame({"name": names, "start_us": starts, "dur_us": durs, "stream": threads})
    df.insert(0, "rank", rank)
    return df


def read_trace_view_ops(path: Path, rank: int) -> pd.DataFrame:

    pid_names: dict = {}
    rows = []
    for ev in iter_events(path):
        ph = ev.get("ph")
        if ph == "M" and ev.get("name") == "process_name":
            pid_names[ev.get("pid")] = (ev.get("args") or {}).get("name")
        elif ph == "X":
            rows.append(
                (ev.get("pid"), ev.get("name"), float(ev.get("ts")), float(ev.get("dur", 0.0)), str(ev.get("tid")))
            )
    cpu_pids = {p for p, n in pid_names.items() if n == "CPU OP"}
    rows = [r for r in rows if r[0] in cpu_pids]
    df = pd.DataFrame(rows, columns=["pid", "name", "start_us", "dur_us", "stream"]).drop(columns="pid")
    df = df.drop_duplicates(["name", "start_us"])
    df.insert(0, "rank", rank)
    return df


def read_shapes(path: Path) -> dict[str, list[list[int]]]:
    """`Type-opN` → input shapes, from cpu_framework_{rank}.txt (first occurrence; names may repeat)."""
    shapes: dict[str, list[list[int]]] = {}
    if not path.exists():
        return shapes
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(";")
        if len(parts) < 3:
            continue
        key = parts[1]
        if key in shapes:
            continue
        ins = []
        for p in parts[3:]:
            if ":" not in p:
                continue
            val = p.split(":", 1)[1].strip()
            if val.startswith("["):
                try:
                    ins.append([int(x) for x in val.strip("[]").split(",") if x.strip()])
                except ValueError:
                    continue
        shapes[key] = ins
    return shapes


def infer_steps(ops: pd.DataFrame) -> pd.DataFrame:
    """Step windows from the op sequence alone: a training step replays the same op sequence, so
    a new step starts at each execution of the first op of the profile. The window ends where the
    next one starts (the last one at its last op's end)."""
    rows = []
    for rank, g in ops.sort_values("start_us").groupby("rank", sort=True):
        first = g["name"].iloc[0]
        starts = g.loc[g["name"] == first, "start_us"].to_numpy()
        end_all = float((g["start_us"] + g["dur_us"]).max())
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else end_all
            rows.append({"rank": rank, "step": i, "start_us": float(s), "end_us": float(e)})
    return pd.DataFrame(rows, columns=list(STEPS))


def steps_from_workload(workload_steps: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Step windows of the profiled steps from the workload's own records (same wall clock)."""
    ws = workload_steps
    if "profiled" in ws.columns and ws["profiled"].any():
        ws = ws[ws["profiled"].astype(bool)]
    out = pd.DataFrame(
        {
            "rank": ws["rank"].astype("int64"),
            "step": ws["step"].astype("int64"),
            "start_us": ws["start_ts"].astype(float) * 1e6,
            "end_us": ws["end_ts"].astype(float) * 1e6,
        }
    )
    # keep steps that overlap the profiled ops of their rank
    spans = ops.groupby("rank").agg(lo=("start_us", "min"), hi=("start_us", "max"))
    keep = [
        r.rank in spans.index and r.end_us >= spans.at[r.rank, "lo"] and r.start_us <= spans.at[r.rank, "hi"]
        for r in out.itertuples()
    ]
    return out[keep].reset_index(drop=True)


def fill_wait_from_alignment(comm_ops: pd.DataFrame) -> pd.DataFrame:
    """The CPU profiler times a collective from call to return, waiting for peers included. A
    collective can only move data once every rank has entered it, so for the n-th execution of an
    op on each rank: wait = (latest entry over ranks - own entry), transit = elapse - wait. Needs
    the ranks' clocks to agree (true on one host: they share the wall clock)."""
    if comm_ops.empty or comm_ops["rank"].nunique() < 2:
        return comm_ops
    df = comm_ops.copy()
    df["_nth"] = df.sort_values("start_us").groupby(["rank", "op_name"]).cumcount()
    last_entry = df.groupby(["op_name", "_nth"])["start_us"].transform("max")
    n_ranks = df.groupby(["op_name", "_nth"])["rank"].transform("nunique")
    complete = n_ranks == df["rank"].nunique()
    wait = ((last_entry - df["start_us"]) / 1000.0).clip(lower=0)
    wait = np.minimum(wait, df["elapse_ms"])
    df["wait_ms"] = np.where(complete, wait, np.nan)
    df["transit_ms"] = np.where(complete, df["elapse_ms"] - wait, np.nan)
    return df.drop(columns="_nth")


def read_memory_record(path: Path, rank: int) -> pd.DataFrame:
    """`FRAMEWORK/cpu_ms_memory_record_{rank}.txt` (written with profile_memory=True): `Timestamp(ns),Total
    Allocated(Byte),Total Reserved(Byte),Total Active(Byte)`, one row per allocation or free of MindSpore's CPU
    allocator -> schema MEMORY rows (component "cpu"). A damaged file raises ProfileFormatError naming it."""

    df = read_csv(
        path,
        {"Timestamp(ns)": "ts_ns", "Total Allocated(Byte)": "allocated_bytes"},
        {"Total Reserved(Byte)": "reserved_bytes", "Total Active(Byte)": "active_bytes"},
        numeric=("ts_ns", "allocated_bytes", "reserved_bytes", "active_bytes"),
    )
    out = pd.DataFrame(
        {
            "rank": rank,
            "component": "cpu",
            "ts_us": df["ts_ns"] / 1e3,
            "allocated_bytes": df["allocated_bytes"],
            "reserved_bytes": df["reserved_bytes"] if "reserved_bytes" in df else float("nan"),
            "active_bytes": df["active_bytes"] if "active_bytes" in df else float("nan"),
            "device": "cpu",
        }
    )
    return conform(out, MEMORY)


def parse(path: str | Path, workload_steps: pd.DataFrame | None = None, meta: dict | None = None) -> Profile:
    """Read every rank's CPU profile under `path` into one Profile."""
    root = Path(path)
    if not root.exists():
        raise ProfileFormatError(root, "does not exist")
    rank_dirs = find_rank_dirs(root)
    if not rank_dirs:
        raise ProfileFormatError(root, "no MindSpore CPU profiler output found (expected */FRAMEWORK/cpu_op_* files)")
    meta = dict(meta or {})
    frames, shapes_by_rank, rank_rows, mem_frames, warnings = [], {}, [], [], []
    bad_memory: set[int] = set()
    seen: dict[int, Path] = {}
    for d in rank_dirs:
        rank = rank_of(d)
        if rank in seen:  # several profiling cycles of one rank: keep them all
            pass
        seen[rank] = d
        ts_file = d / "FRAMEWORK" / f"cpu_op_execute_timestamp_{rank}.txt"
        tv_file = d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        if ts_file.exists():
            df = read_timestamps(ts_file, rank)
        elif tv_file.exists():
            df = read_trace_view_ops(tv_file, rank)
        else:
            raise ProfileFormatError(
                d, f"neither FRAMEWORK/{ts_file.name} nor ASCEND_PROFILER_OUTPUT/trace_view.json is there"
            )
        frames.append(df)
        mem_file = d / "FRAMEWORK" / f"cpu_ms_memory_record_{rank}.txt"
        if mem_file.exists():
            try:
                mem_frames.append(read_memory_record(mem_file, rank))
            except ProfileFormatError as exc:  # the rank's memory is unknown; its ops are analyzed as before
                warnings.append(
                    f"{exc.path}: {exc.problem} (ignored: the rank's memory is unknown, the rest is analyzed)"
                )
                bad_memory.add(rank)
        shapes_by_rank[rank] = read_shapes(d / "FRAMEWORK" / f"cpu_framework_{rank}.txt")
        rank_rows.append({"rank": rank, "host": d.name.split("_")[0], "device": "cpu", "path": str(d)})
    ops = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["rank", "name", "start_us", "dur_us", "stream"])
    )
    if ops.empty:
        raise ProfileFormatError(root, "the CPU profile holds no op executions")
    ops["type"] = ops["name"].map(op_type)
    ops["category"] = np.where(ops["type"].isin(list(COMM_TYPES)), "communication", "compute")
    ops["core_type"] = "CPU"
    ops = ops.sort_values(["rank", "start_us"]).reset_index(drop=True)

    world_size = int(meta.get("world_size") or len(seen))
    if workload_steps is not None and len(workload_steps):
        steps = steps_from_workload(workload_steps, ops)
        meta["step_source"] = "workload"
    else:
        steps = infer_steps(ops)
        meta["step_source"] = "op-sequence"
    ops["step"] = step_of(ops, steps)

    comm = ops[ops["category"] == "communication"].copy()
    dtype_bytes = float(meta.get("comm_dtype_bytes", 4))
    sizes = []
    for r in comm.itertuples():
        key = r.name.rsplit("/", 1)[-1]
        shp = shapes_by_rank.get(r.rank, {}).get(key)
        # a fused collective (MindSpore comm_fusion) takes one input per gradient: its payload is all of them
        sizes.append(float(sum(math.prod(x) for x in shp)) * dtype_bytes if shp else math.nan)
    comm_ops = pd.DataFrame(
        {
            "rank": comm["rank"].astype("int64"),
            "step": comm["step"],
            "op_name": comm["name"],
            "op_type": comm["type"].map(COMM_TYPES),
            "group": meta.get("comm_group", "world"),
            "group_size": world_size,
            "start_us": comm["start_us"],
            "elapse_ms": comm["dur_us"] / 1000.0,
            "size_bytes": sizes,
        }
    )
    comm_ops = fill_wait_from_alignment(comm_ops)
    ranks = pd.DataFrame(rank_rows).drop_duplicates("rank")
    ranks["world_size"] = world_size
    meta.setdefault("device_type", "CPU")

    memory = pd.concat(mem_frames, ignore_index=True) if mem_frames else empty(MEMORY)
    memory = memory[~memory["rank"].isin(bad_memory)].sort_values(["rank", "ts_us"], kind="stable")
    return conformed_profile(
        "mindspore-cpu",
        str(root),
        meta,
        warnings,
        ranks=ranks,
        steps=steps,
        ops=ops,
        comm_ops=comm_ops,
        memory_records=memory,
    )
