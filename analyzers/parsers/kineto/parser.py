"""PyTorch profiler (Kineto) traces -> the schema.

One folder may hold many ranks' traces; each file's rank is `distributedInfo.rank` (never the file
name). Two files claiming one rank are an error naming both; a file without distributedInfo is rank 0,
with a warning.

GPU traces (any kernel, memcpy or memset event): `ops` are the device ops. Kernels named `nccl*Kernel*`
(`ncclKernel_*`, `ncclDevKernel_*`; HolisticTraceAnalysis's rule) are `communication`, memcpy/memset
are `memory`, the other kernels `compute`, so the breakdown's computing / communication / overlap are
HTA's computation and communication kernel unions. A device op belongs to the `ProfilerStep#N` whose CPU
span holds its launch (the cuda_runtime event with the same correlation id); step N's window is the
device span of its ops (first start to last end, as the Ascend profiler's step trace), with the host step
start beside it (`host_start_us`, for `preparing_us`). CPU ops are counted (meta `cpu_ops`), not kept.

CPU-only traces (gloo): `ops` are the top-level CPU ops of each thread (`compute`) and the `gloo:*`
annotations (`communication`, on gloo's threads); step windows are the ProfilerStep CPU spans.

Collectives (`comm_ops`): one per NCCL kernel (type, sizes and group from the kernel's own collective args
or from the `record_param_comms` op that launched it) or per gloo annotation (size = its `Input Dims` elements x
its `Input type` width; the trace has them only with `record_shapes=True`, which perfbench's capture sets: without
them the size is null; gloo records no `record_param_comms`, PyTorch 2.13 on CPU). `op_name` is `<type>#<k>` with k
counting that type in that group on the rank, so the k-th all-reduce of a group has one name on every rank. Process
groups come from `distributedInfo.pg_config`. `[memory]` events (profile_memory=True) become memory_records
(component "PyTorch").

No ProfilerStep: one step (numbered 0) spanning the trace's ops, with a warning.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.kineto.reader import KinetoTrace, looks_like_kineto, read_trace
from analyzers.schema import COMM_OPS, MEMORY, STEPS, Profile, conform, conformed_profile, empty, step_of
from perfbench.errors import ProfileFormatError, UserError

SOURCE = "kineto"
NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
#: collective names (record_param_comms' "Collective name", nccl:/gloo: annotations, kernel names) -> schema type
COLLECTIVE_TYPES = {
    "allreduce": "allreduce",
    "all_reduce": "allreduce",
    "allreduce_coalesced": "allreduce",
    "allgather": "allgather",
    "all_gather": "allgather",
    "_allgather_base": "allgather",
    "_all_gather_base": "allgather",
    "allgather_into_tensor_coalesced": "allgather",
    "allgather_coalesced": "allgather",
    "reducescatter": "reducescatter",
    "reduce_scatter": "reducescatter",
    "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor_coalesced": "reducescatter",
    "broadcast": "broadcast",
    "all_to_all": "alltoall",
    "alltoall": "alltoall",
    "all_to_allv": "alltoallv",
    "alltoall_base": "alltoall",
    "reduce": "reduce",
    "send": "send",
    "recv": "recv",
    "barrier": "barrier",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": "sendrecv",
}
DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "c10::bfloat16": 2,
    "c10::half": 2,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "long int": 8,
    "char": 1,
    "byte": 1,
    "int8": 1,
    "uint8": 1,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
    "short": 2,
    "int16": 2,
}
#: record_param_comms "Collective name"s that move no data (waits on a work handle)
NOT_COLLECTIVES = ("wait", "")
#: CPU op names that are communication calls on the training thread (not compute) in CPU-only traces
CPU_COMM_PREFIXES = ("c10d::", "nccl:", "gloo:", "record_param_comms", "ProfilerStep")


def trace_files(d: Path) -> list[Path]:
    """The Kineto traces directly in `d` (not below), sorted."""
    try:
        cands = sorted(p for p in d.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
    except OSError:
        return []
    return [p for p in cands if looks_like_kineto(p)]


def detect(d: Path) -> bool:
    return bool(trace_files(Path(d)))


def parse(d: Path, **kw) -> Profile:
    """Every trace in folder `d` (one per rank) into one Profile."""
    d = Path(d)
    files = [d] if d.is_file() else trace_files(d)
    if not files:
        raise ProfileFormatError(d, "no PyTorch profiler trace (*.json[.gz] with traceEvents) here")
    parts, read, failed = [], [], []
    for f in files:
        try:
            parts.append(parse_trace(f))
            read.append(f)
        except ProfileFormatError as exc:
            if len(files) == 1:
                raise
            failed.append(f"{exc.path}: {exc.problem} (this rank is not analyzed)")
    if not parts:
        raise ProfileFormatError(d, f"no readable trace: {failed[0]}")
    owner: dict[int, Path] = {}
    for f, p in zip(read, parts):
        r = int(p.ranks["rank"].iloc[0])
        if r in owner:
            raise UserError(f"rank {r} claimed by two traces under {d}: {owner[r]} and {f} (distributedInfo.rank)")
        owner[r] = f
    out = _merge(parts, d)
    out.warnings = failed + out.warnings
    return out


def parse_trace(path: Path) -> Profile:
    """One trace file (one rank) into a Profile."""
    t = read_trace(path)
    warnings: list[str] = []
    info = t.header.get("distributedInfo")
    if not isinstance(info, dict) or "rank" not in info:
        warnings.append(f"{path}: no distributedInfo.rank in the trace: read as rank 0")
        info = info if isinstance(info, dict) else {}
        rank = 0
    else:
        try:
            rank = int(info["rank"])
        except (TypeError, ValueError):
            raise ProfileFormatError(path, f"distributedInfo.rank = {info['rank']!r} is not an integer") from None
    gpu = bool(t.device_ops)
    ops = _device_ops(t, rank) if gpu else _cpu_ops(t, rank)
    steps = _steps(t, ops, rank, gpu, warnings, path)
    comm = _comm_ops(t, rank, ops, info)
    world = info.get("world_size")
    ranks = pd.DataFrame(
        [
            {
                "rank": rank,
                "host": t.header.get("host_name"),
                "device": _device_label(t) if gpu else "cpu",
                "path": str(path),
                "world_size": int(world) if isinstance(world, (int, float)) else pd.NA,
                "inputs": path.name,
            }
        ]
    )
    meta = {
        "producer": "pytorch-profiler",
        "backend": info.get("backend"),
        "nccl_version": info.get("nccl_version"),
        "parallel_groups": _groups(info),
        "cpu_ops": len(t.cpu_ops) + len(t.param_comms),
        "trace_events": t.events,
        "device_kind": "gpu" if gpu else "cpu",
    }
    return conformed_profile(
        SOURCE,
        str(path),
        meta,
        warnings,
        ranks=ranks,
        steps=steps,
        ops=ops,
        comm_ops=comm,
        memory_records=_memory(t, rank),
    )


def _device_label(t: KinetoTrace) -> str:
    devs = {op[5] for op in t.device_ops if op[5] is not None}
    name = ""
    props = t.header.get("deviceProperties") or []
    if devs and isinstance(props, list):
        dev = min(devs)
        name = next((str(p.get("name")) for p in props if isinstance(p, dict) and p.get("id") == dev), "")
    label = ",".join(f"gpu:{x}" for x in sorted(devs)) or "gpu"
    return f"{label} {name}".strip()


def short_kernel_name(name: str) -> str:
    """`void ns::kernel<T, 2>(args)` -> `ns::kernel` (memcpy/memset names as they are)."""
    if name.startswith(("Memcpy", "Memset")):
        return name.split(" (")[0]
    s = name[5:] if name.startswith("void ") else name
    for ch in ("<", "("):
        s = s.split(ch, 1)[0]
    return s.strip() or name


def _kernel_collective(name: str) -> str | None:
    """`ncclKernel_AllReduce_RING_LL_Sum_float(...)`, `ncclDevKernel_AllGather_RING_LL(...)` -> schema type."""
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", name)
    if not m:
        return None
    return COLLECTIVE_TYPES.get(m.group(1).lower(), m.group(1).lower())


def _collective_type(name) -> str:
    s = str(name or "").lower()
    for p in ("nccl:", "gloo:", "c10d::"):
        if s.startswith(p):
            s = s[len(p) :]
    s = s.rstrip("_")
    return COLLECTIVE_TYPES.get(s, s)


def _device_kind(name: str, cat: str) -> tuple[str, str]:
    """(category, type) of a device op: NCCL kernels are communication, other kernels compute, memcpy/memset memory."""
    if cat == "kernel" and NCCL_KERNEL_RE.match(name):
        return "communication", _kernel_collective(name) or "nccl"
    if cat == "kernel":
        return "compute", short_kernel_name(name)
    return "memory", short_kernel_name(name)


def _device_ops(t: KinetoTrace, rank: int) -> pd.DataFrame:
    cols = ["rank", "name", "type", "category", "start_us", "dur_us", "stream", "core_type", "correlation"]
    if not t.device_ops:
        return pd.DataFrame([], columns=cols).assign(step=pd.Series(dtype="Float64"))
    names, cats, ts, dur, stream, _device, corr, _coll = zip(*t.device_ops)
    # millions of ops share a few thousand (name, cat) pairs: each classified once
    kinds = {key: _device_kind(*key) for key in set(zip(names, cats))}
    category, typ = zip(*(kinds[key] for key in zip(names, cats)))
    n = len(names)
    df = pd.DataFrame(
        {
            "rank": [rank] * n,
            "name": names,
            "type": typ,
            "category": category,
            "start_us": ts,
            "dur_us": dur,
            "stream": list(map(str, stream)),
            "core_type": ["GPU"] * n,
            "correlation": corr,
        }
    )
    df["step"] = _launch_steps(t, corr, df.index)
    return df


def _launch_steps(t: KinetoTrace, correlation: tuple, index: pd.Index) -> pd.Series:
    """ProfilerStep number whose CPU span holds each device op's launch (NaN when none does)."""
    out = pd.Series(np.nan, index=index, dtype="Float64")
    if not t.steps or not len(correlation):
        return out
    st = sorted(t.steps, key=lambda s: s[1])
    starts = np.array([s[1] for s in st])
    ends = np.array([s[1] + s[2] for s in st])
    ids = np.array([s[0] for s in st], dtype=float)
    launches, none = t.launches, (None, np.nan)
    launch_ts = np.array(
        [launches.get(int(c), none)[1] if c is not None and c == c else np.nan for c in correlation], dtype=float
    )
    idx = np.searchsorted(starts, launch_ts, side="right") - 1
    ok = (idx >= 0) & ~np.isnan(launch_ts)
    ok &= launch_ts <= ends[np.clip(idx, 0, None)]
    out[:] = np.where(ok, ids[np.clip(idx, 0, None)], np.nan)
    return out


def _top_level(rows: list[tuple]) -> list[tuple]:
    """(name, tid, ts, dur) rows not nested in another row of the same thread."""
    out = []
    end_by_tid: dict = {}
    for row in sorted(rows, key=lambda r: (str(r[1]), r[2], -r[3])):
        end = end_by_tid.get(row[1], -np.inf)
        if row[2] >= end:
            out.append(row)
            end_by_tid[row[1]] = row[2] + row[3]
    return out


def _cpu_ops(t: KinetoTrace, rank: int) -> pd.DataFrame:
    compute = _top_level([r for r in t.cpu_ops if not r[0].startswith(CPU_COMM_PREFIXES)])
    rows = [(rank, n, n, "compute", ts, dur, str(tid), "CPU") for n, tid, ts, dur in compute]
    rows += [(rank, n, _collective_type(n), "communication", ts, dur, str(tid), "CPU") for n, tid, ts, dur, _ in t.gloo]
    df = pd.DataFrame(rows, columns=["rank", "name", "type", "category", "start_us", "dur_us", "stream", "core_type"])
    windows = pd.DataFrame(
        [(rank, n, ts, ts + dur) for n, ts, dur in t.steps], columns=["rank", "step", "start_us", "end_us"]
    )
    df["step"] = step_of(df, windows).astype("Float64")  # the ProfilerStep window holding the op's start
    return df


def _steps(t: KinetoTrace, ops: pd.DataFrame, rank: int, gpu: bool, warnings: list, path: Path) -> pd.DataFrame:
    seen: dict[int, tuple] = {}
    for n, ts, dur in t.steps:
        seen.setdefault(n, (ts, dur))
    if not seen:
        warnings.append(f"{path}: no ProfilerStep#N annotation: the whole trace is read as one step")
        if not len(ops):
            return empty(STEPS)
        ops["step"] = 0
        end = float((ops["start_us"] + ops["dur_us"]).max())
        return pd.DataFrame([{"rank": rank, "step": 0, "start_us": float(ops["start_us"].min()), "end_us": end}])
    rows = []
    spans: dict = {}
    if gpu and len(ops):  # each step's device span: its ops' first start and last end
        by_step = pd.DataFrame({"step": ops["step"], "start": ops["start_us"], "end": ops["start_us"] + ops["dur_us"]})
        g = by_step.groupby("step")
        spans = {k: (float(a), float(b)) for k, a, b in zip(g.size().index, g["start"].min(), g["end"].max())}
    for n, (ts, dur) in sorted(seen.items()):
        row = {"rank": rank, "step": n, "start_us": ts, "end_us": ts + dur, "host_start_us": ts}
        if n in spans:
            row["start_us"], row["end_us"] = spans[n]
        rows.append(row)
    return pd.DataFrame(rows)


def _span_index(spans: list[tuple]) -> dict:
    """tid -> (starts, ends, args) of (tid, ts, dur, args) spans (record_param_comms, nccl:*), sorted by start."""
    by_tid: dict = {}
    for tid, ts, dur, args in spans:
        by_tid.setdefault(tid, []).append((ts, ts + dur, args))
    out = {}
    for tid, rows in by_tid.items():
        rows.sort(key=lambda r: r[0])
        out[tid] = (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]), [r[2] for r in rows])
    return out


def _enclosing(t: KinetoTrace, index: dict, corr) -> dict:
    """The args of the span (see _span_index) around the launch of the kernel with correlation `corr` ({} if none)."""
    launch = t.launches.get(int(corr)) if corr is not None else None
    if launch is None or launch[0] not in index:
        return {}
    starts, ends, args = index[launch[0]]
    i = int(np.searchsorted(starts, launch[1], side="right")) - 1
    return args[i] if i >= 0 and launch[1] <= ends[i] else {}


def _size_bytes(args: dict, op_type: str) -> float:
    n = args.get("In msg nelems")
    if op_type in ("allgather",) and args.get("Out msg nelems") is not None and n is None:
        n = args.get("Out msg nelems")
    width = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    try:
        return float(n) * width if n is not None and width else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _dims_size(args: dict) -> float:
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    total = 0.0
    for shape, dtype in zip(dims, types):
        width = DTYPE_BYTES.get(str(dtype).lower())
        if not width or not isinstance(shape, list):
            continue
        total += float(np.prod(shape)) * width if shape else 0.0
    return total if total > 0 else float("nan")


def _comm_ops(t: KinetoTrace, rank: int, ops: pd.DataFrame, info: dict) -> pd.DataFrame:
    groups = {str(g.get("pg_name")): g for g in info.get("pg_config") or [] if isinstance(g, dict)}
    rows = []
    if t.device_ops:
        index = _span_index(t.param_comms)
        annotations = _span_index(t.nccl)
        comm = ops[ops["category"] == "communication"]
        used: set = set()
        renamed: dict = {"i": [], "type": [], "name": []}
        for i, op in comm.iterrows():
            launched_by = _enclosing(t, index, op["correlation"])
            used.add(id(launched_by))
            args = t.device_ops[i][7] or launched_by
            if args.get("Collective name"):
                typ, size = (
                    _collective_type(args["Collective name"]),
                    _size_bytes(args, _collective_type(args["Collective name"])),
                )
            else:  # no collective args (older PyTorch): the nccl:* annotation around the launch, else the kernel name
                note = _enclosing(t, annotations, op["correlation"])
                typ = _collective_type(note["name"]) if note else op["type"]
                size = _dims_size(note) if note else float("nan")
            rows.append(_comm_row(rank, op, typ, args, groups, size))
            # the kernel's name says SendRecv for all-to-alls too: name the op by its collective
            renamed["i"].append(i)
            renamed["type"].append(typ)
            renamed["name"].append(f"nccl:{typ} {op['name']}")
        if renamed["i"]:
            ops.loc[renamed["i"], "type"] = renamed["type"]
            ops.loc[renamed["i"], "name"] = renamed["name"]
        rows += _unlaunched_param_comms(t, rank, ops, groups, used)
    else:
        comm = ops[ops["category"] == "communication"]
        gloo_args = [g[4] for g in t.gloo]
        # gloo's annotations do not name their group: a job with one process group has only that one; where all
        # its groups have one size (pg_config's pg_size), that is the group's size, whichever group it is
        only: dict = {"Process Group Name": next(iter(groups))} if len(groups) == 1 else {}
        sizes = {g.get("pg_size") for g in groups.values()}
        if len(groups) > 1 and len(sizes) == 1:
            only["Group size"] = sizes.pop()
        for (i, op), args in zip(comm.iterrows(), gloo_args):
            rows.append(_comm_row(rank, op, op["type"], only, groups, _dims_size(args)))
    if not rows:
        return empty(COMM_OPS)
    df = pd.DataFrame(rows).sort_values("start_us", kind="stable")
    seq = df.groupby(["group", "op_type"], sort=False).cumcount()
    df["op_name"] = df["op_type"] + "#" + seq.astype(str)
    return df


def _unlaunched_param_comms(t: KinetoTrace, rank: int, ops: pd.DataFrame, groups: dict, used: set) -> list[dict]:
    """record_param_comms ops that launched no NCCL kernel (e.g. a world of one rank): the collective as the
    CPU recorded it; its device time is unknown (elapse_ms null)."""
    rows = []
    steps = sorted(t.steps, key=lambda s: s[1])
    for _tid, ts, dur, args in t.param_comms:
        if id(args) in used or str(args.get("Collective name", "wait")).lower() in NOT_COLLECTIVES:
            continue
        typ = _collective_type(args["Collective name"])
        step = next((n for n, s0, d in steps if s0 <= ts < s0 + d), pd.NA)
        op = {"step": step, "start_us": ts, "dur_us": float("nan"), "name": "record_param_comms"}
        rows.append(_comm_row(rank, op, typ, args, groups, _size_bytes(args, typ)))
    return rows


def _comm_row(rank, op, typ, args, groups, size) -> dict:
    pg = args.get("Process Group Name", args.get("Process Group ID"))
    group = str(pg) if pg is not None else ""
    gsize = args.get("Group size")
    if gsize is None and group in groups:
        gsize = groups[group].get("pg_size")
    return {
        "rank": rank,
        "step": op["step"],
        "op_type": typ,
        "group": group,
        "group_size": int(gsize) if isinstance(gsize, (int, float)) else pd.NA,
        "start_us": op["start_us"],
        "elapse_ms": op["dur_us"] / 1000.0,
        "size_bytes": size,
        "kernel": op["name"],
    }


def _groups(info: dict) -> dict:
    out = {}
    for g in info.get("pg_config") or []:
        if not isinstance(g, dict) or g.get("pg_name") is None:
            continue
        ranks = g.get("ranks")
        out[str(g["pg_name"])] = {
            "ranks": sorted(int(r) for r in ranks) if isinstance(ranks, list) else [],
            "kind": "data" if g.get("pg_desc") == "default_pg" else str(g.get("pg_desc") or ""),
            "source": "distributedInfo.pg_config",
            "label": g.get("pg_desc"),
            "size": g.get("pg_size"),
        }
    return out


def _memory(t: KinetoTrace, rank: int) -> pd.DataFrame:
    if not t.memory:
        return empty(MEMORY)
    rows = []
    for ts, a in t.memory:
        dev = a.get("Device Id")
        kind = a.get("Device Type")
        rows.append(
            {
                "rank": rank,
                "component": "PyTorch",
                "ts_us": ts,
                "allocated_bytes": a.get("Total Allocated", np.nan),
                "reserved_bytes": a.get("Total Reserved", np.nan),
                "active_bytes": np.nan,
                "device": "cpu" if kind == 0 or dev == -1 else f"gpu:{dev}",
            }
        )
    return conform(pd.DataFrame(rows), MEMORY)


def _merge(parts: list[Profile], d: Path) -> Profile:
    if len(parts) == 1:
        return parts[0]
    out = Profile(source=SOURCE, path=str(d))
    for name in ("ranks", "steps", "ops", "comm_ops", "memory_records"):
        tabs = [getattr(p, name) for p in parts if len(getattr(p, name))]
        if tabs:
            setattr(out, name, pd.concat(tabs, ignore_index=True))
    out.meta = dict(parts[0].meta)
    out.meta["rank_meta"] = {int(p.ranks["rank"].iloc[0]): p.meta for p in parts}
    groups: dict = {}
    for p in parts:
        groups.update(p.meta.get("parallel_groups") or {})
    out.meta["parallel_groups"] = groups
    out.warnings = [w for p in parts for w in p.warnings]
    return out
