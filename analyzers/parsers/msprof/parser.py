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

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.msprof.common import comm_op_type, link_rows, op_type_from_name
from analyzers.parsers.msprof.csvread import read_table, to_numbers
from analyzers.parsers.msprof.files import device_id, device_info, summary_files
from analyzers.parsers.trace_view import iter_events
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

SOURCE = "msprof"
OUT_DIR = "mindstudio_profiler_output"
MAX_DEPTH = 4

COMPUTE_TASKS = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "AIV", "AIC", "FFTS_PLUS", "DSA"}
COMM_TASKS = ("COMMUNICATION", "HCCL")
#: HCCL task types that move data (the rest are notifications)
DATA_TASKS = {"Memcpy", "Reduce_Inline", "Reduce Inline", "RDMASend", "RDMA_Send", "Inline_Reduce"}
INVALID_RANK = 4294967295
#: task types only HCCL runs (notifications between ranks, inline reductions): parts of a collective
HCCL_SUBTASKS = {
    "NOTIFY_WAIT",
    "NOTIFY_RECORD",
    "NOTIFY_WAIT_V2",
    "NOTIFY_RECORD_V2",
    "REDUCE_ASYNC",
    "REDUCE_ASYNC_V2",
    "REDUCE_INLINE",
    "INLINE_REDUCE",
    "RDMA_SEND",
    "RDMASEND",
}
#: task types HCCL also runs, but not only HCCL (a MEMCPY_ASYNC may be a host copy): sub-tasks when
#: their stream carries HCCL-only tasks
HCCL_STREAM_TASKS = {"MEMCPY_ASYNC", "MEMCPY_ASYNC_V2", "EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET"}


# ---- detection -------------------------------------------------------------------------------------


def _timeline_dir(d: Path) -> bool:
    tl = d / "timeline"
    return tl.is_dir() and any(_TL_RX.match(p.name) for p in tl.iterdir())


_TL_RX = re.compile(r"^(msprof|hccl|task_time|step_trace)_(\d+)_(\d+)_(\d+)(?:_slice_\d+)?\.json$")


def _is_unit(d: Path) -> bool:
    """A PROF_* job folder, its mindstudio_profiler_output/, or a device_N folder with timeline/."""
    if d.name == OUT_DIR:
        return any(p.is_file() and p.suffix in (".csv", ".json") for p in d.iterdir())
    if (d / OUT_DIR).is_dir():
        return True
    if d.name.startswith("device_") and _timeline_dir(d):
        return True
    return any(c.is_dir() and c.name.startswith("device_") and _timeline_dir(c) for c in d.iterdir())


def detect(path) -> bool:
    """True if `path` itself is an msprof output folder (looks at its direct children only)."""
    path = Path(path)
    try:
        return path.is_dir() and _is_unit(path)
    except OSError:
        return False


def _has_devices(d: Path) -> bool:
    return any(c.is_dir() and c.name.startswith("device_") for c in d.iterdir())


def _units(path: Path) -> list[Path]:
    if _is_unit(path):
        return [path]
    found = []
    base = len(path.parts)
    for d in sorted(p for p in path.rglob("*") if p.is_dir()):
        if len(d.parts) - base > MAX_DEPTH or any(d.is_relative_to(u) for u in found):
            continue
        if _is_unit(d):
            found.append(d)
    return found


# ---- rank ---------------------------------------------------------------------------------------------


def _rank_of(info: dict, dev: int | None, fallback: int | None) -> tuple[int, str]:
    rid = info.get("rank_id") if info else None
    try:
        rid = int(rid) if rid is not None else None
    except (TypeError, ValueError):
        rid = None
    if rid is not None and rid >= 0:
        return rid, str(dev if dev is not None else rid)
    if dev is not None:
        return dev, str(dev)
    if fallback is not None:
        return fallback, str(fallback)
    return 0, "0"


# ---- summary CSVs -------------------------------------------------------------------------------------

OP_SUMMARY_REQUIRED = ["Op Name", "Task Start Time(us)", "Task Duration(us)"]
OP_SUMMARY_ALIASES = {"Block Dim": ["Block Num"], "Mix Block Dim": ["Mix Block Num"], "OP Type": ["Op Type"]}


def _read_parts(files: list[Path], required, **kw) -> pd.DataFrame:
    parts = [read_table(p, required, **kw) for p in files]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def _category(task_type: pd.Series, op_type: pd.Series, name: pd.Series, stream: pd.Series | None = None) -> np.ndarray:
    """compute | communication | communication_task (an HCCL sub-task of a collective: its time is
    already the collective's, never a kernel of its own) | other."""
    tt = task_type.fillna("").astype(str).str.upper()
    kind = tt.where(tt != "", name.fillna("").astype(str).str.upper())
    sub = kind.isin(HCCL_SUBTASKS)
    if stream is not None and sub.any():
        hccl_streams = set(stream[sub].astype(str))
        sub |= kind.isin(HCCL_STREAM_TASKS) & stream.astype(str).isin(hccl_streams)
    comm = tt.str.contains("|".join(COMM_TASKS)) | op_type.map(comm_op_type).notna() | name.map(comm_op_type).notna()
    compute = tt.isin(COMPUTE_TASKS) | (tt == "")
    return np.where(sub, "communication_task", np.where(comm, "communication", np.where(compute, "compute", "other")))


def _ops_from_op_summary(files: list[Path], rank: int) -> pd.DataFrame:
    df = _read_parts(files, OP_SUMMARY_REQUIRED, aliases=OP_SUMMARY_ALIASES, what="op_summary CSV")
    num = to_numbers(
        df,
        ["Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim"],
        path=files[0],
        strict=("Task Start Time(us)", "Task Duration(us)"),
    )
    name = df["Op Name"]
    typ = df["OP Type"] if "OP Type" in df.columns else name.map(op_type_from_name)
    task = df["Task Type"] if "Task Type" in df.columns else pd.Series("", index=df.index)
    out = pd.DataFrame(
        {
            "rank": rank,
            "name": name,
            "type": typ,
            "category": _category(task, typ, name),
            "start_us": num["Task Start Time(us)"],
            "dur_us": num["Task Duration(us)"],
            "stream": df["Stream ID"] if "Stream ID" in df.columns else pd.NA,
            "core_type": task,
        }
    )
    if "Block Dim" in num:
        out["block_dim"] = num["Block Dim"]
    if "Mix Block Dim" in num:
        out["mix_block_dim"] = num["Mix Block Dim"]
    if "Task Wait Time(us)" in num:
        out["wait_us"] = num["Task Wait Time(us)"]
    used = set(OP_SUMMARY_REQUIRED) | {
        "OP Type",
        "Task Type",
        "Stream ID",
        "Block Dim",
        "Mix Block Dim",
        "Task Wait Time(us)",
    }
    for c in df.columns:
        if c not in used and c not in out.columns:
            out[c] = df[c].to_numpy()
    return out


def _ops_from_task_time(files: list[Path], rank: int) -> pd.DataFrame:
    req = ["kernel_name", "task_time(us)", "task_start(us)"]
    df = _read_parts(files, req, what="task_time CSV")
    num = to_numbers(df, ["task_time(us)", "task_start(us)", "task_stop(us)"], path=files[0], strict=req[1:])
    name = df["kernel_name"]
    task = df["kernel_type"] if "kernel_type" in df.columns else pd.Series("", index=df.index)
    out = pd.DataFrame(
        {
            "rank": rank,
            "name": name,
            "type": name.map(op_type_from_name),
            "category": _category(task, name, name),
            "start_us": num["task_start(us)"],
            "dur_us": num["task_time(us)"],
            "stream": df["stream_id"] if "stream_id" in df.columns else pd.NA,
            "core_type": task,
        }
    )
    out.loc[name.isin(["N/A", ""]), "category"] = "other"
    return out


STEP_TRACE_REQUIRED = ["Iteration ID", "Iteration End(us)", "Iteration Time(us)"]


def _steps_from_step_trace_csv(files: list[Path], rank: int):
    # CANN docs spell the time columns with and without the unit: "Iteration End" / "Iteration End(us)"
    aliases = {
        f"{c}(us)": [c]
        for c in (
            "Iteration End",
            "FP Start",
            "BP End",
            "Iteration Time",
            "FP to BP Time",
            "Iteration Refresh",
            "Data Aug Bound",
        )
    }
    df = _read_parts(files, STEP_TRACE_REQUIRED, aliases=aliases, what="step_trace CSV")
    cols = [c for c in df.columns if c.endswith("(us)")] + ["Iteration ID"]
    num = to_numbers(df, cols, path=files[0], strict=STEP_TRACE_REQUIRED)
    step = num["Iteration ID"].astype("int64")
    end = num["Iteration End(us)"]
    dur = num["Iteration Time(us)"]
    # CANN: Iteration Time = this Iteration End - the previous one (the first: Iteration End - FP Start);
    # exports that wrote only the iteration's own span still get iteration-to-iteration windows
    steps = _iteration_windows(pd.DataFrame({"rank": rank, "step": step, "start_us": end - dur, "end_us": end}))
    ref = pd.DataFrame(
        {"rank": rank, "step": step, "step_us": steps["end_us"] - steps["start_us"], "iteration_time_us": dur}
    )
    for src, dst in (
        ("FP to BP Time(us)", "fp_bp_us"),
        ("Iteration Refresh(us)", "iteration_refresh_us"),
        ("Data Aug Bound(us)", "data_aug_bound_us"),
    ):
        if src in num:
            ref[dst] = num[src]
    return steps, ref


def _records(files: list[Path] | None, what: str) -> list[dict] | None:
    if not files:
        return None
    df = _read_parts(files, [], what=what)
    return df.to_dict(orient="records")


# ---- Chrome-trace JSON ------------------------------------------------------------------------------


def _trace(path: Path):
    """(events, process names, thread names) of one small Chrome-trace file."""
    pn, tn, ev = {}, {}, []
    for e in _iter_events(path):
        ph = e.get("ph")
        if ph == "M":
            args = e.get("args") or {}
            if e.get("name") == "process_name":
                pn[e.get("pid")] = args.get("name")
            elif e.get("name") == "thread_name":
                tn[(e.get("pid"), e.get("tid"))] = args.get("name")
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, float) or not isinstance(dur, float) or ts != ts or dur != dur:
                raise ProfileFormatError(path, f"complete event {str(e.get('name'))[:60]!r} has no numeric ts/dur")
            ev.append(e)
    return ev, pn, tn


def _iter_events(path: Path):
    """analyzers.parsers.trace_view.iter_events, falling back to ijson's pure-Python backend when the C backend
    (yajl) overflows: msprof writes 64-bit unsigned ids such as connection_id 18446744073709551615."""

    try:
        yield from list(iter_events(path))
        return
    except ProfileFormatError as exc:
        if "integer overflow" not in exc.problem:
            raise
    import ijson

    backend = ijson.get_backend("python")
    n = 0
    try:
        with open(path, "rb") as fh:
            head = fh.read(64).lstrip()
            fh.seek(0)
            prefix = "item" if head[:1] == b"[" else "traceEvents.item"
            for e in backend.items(fh, prefix, use_float=True):
                n += 1
                if not isinstance(e, dict):
                    raise ProfileFormatError(path, f"event #{n} is a {type(e).__name__}, expected an object")
                for k in ("ts", "dur"):
                    if k in e:
                        try:
                            e[k] = float(str(e[k]).strip())
                        except ValueError:
                            e[k] = float("nan")
                yield e
    except ijson.JSONError as exc:
        raise ProfileFormatError(
            path, f"truncated or corrupt JSON after {n} events ({str(exc).splitlines()[0][:200]})"
        ) from None


STEP_CATS = {"Iteration Time", "FP_BP Time", "Iteration Refresh", "Reduce", "Data_aug Bound"}


def _steps_from_events(ev: list[dict], rank: int, path: Path):
    steps, ref = [], {}
    for e in ev:
        cat = e.get("cat")
        if cat not in STEP_CATS:
            continue
        args = e.get("args") or {}
        it = args.get("Iteration ID")
        if it is None:
            m = re.search(r"(\d+)$", str(e.get("name", "")))
            it = int(m.group(1)) if m else None
        if it is None:
            continue
        try:
            it = int(it)
        except (TypeError, ValueError):
            raise ProfileFormatError(path, f"event {e.get('name')!r}: Iteration ID {it!r} is not an integer") from None
        ts, dur = e.get("ts"), e.get("dur")
        if ts is None or dur is None or ts != ts:
            raise ProfileFormatError(path, f"event {e.get('name')!r} has no ts/dur")
        r = ref.setdefault(it, {"rank": rank, "step": it})
        if cat == "Iteration Time":
            steps.append({"rank": rank, "step": it, "start_us": ts, "end_us": ts + dur})
            r["iteration_time_us"] = dur
        elif cat == "FP_BP Time":
            r["fp_bp_us"] = dur
        elif cat == "Iteration Refresh":
            r["iteration_refresh_us"] = dur
        elif cat == "Reduce":
            r["reduce_us"] = r.get("reduce_us", 0.0) + dur
    steps = list({s["step"]: s for s in steps}.values())
    steps = _iteration_windows(pd.DataFrame(steps)).to_dict("records") if steps else []
    for st in steps:
        r = ref[st["step"]]
        r["step_us"] = st["end_us"] - st["start_us"]
        gap = r["step_us"] - r["iteration_time_us"]
        r["data_aug_bound_us"] = gap if abs(gap) > 1e-3 else 0.0
    return steps, [r for r in ref.values() if "step_us" in r]


def _iteration_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Step N spans from the end of iteration N-1 to the end of iteration N (CANN: Iteration Time =
    this Iteration End - the previous one): the gap between iterations (data loading, host work:
    msprof's Data Aug Bound) belongs to the step it delays. The first iteration, or one whose
    predecessor was not traced, keeps its own span. Same rows and index as `steps`."""
    out = steps.sort_values(["rank", "step"], kind="stable").copy()
    prev_end = out.groupby("rank")["end_us"].shift()
    prev_step = out.groupby("rank")["step"].shift()
    follow = (prev_step == out["step"] - 1) & (prev_end <= out["start_us"])
    out["start_us"] = out["start_us"].where(~follow, prev_end)
    return out.loc[steps.index]


def _ops_from_hardware(ev, pn, rank: int, step: int | None = None) -> pd.DataFrame:
    hw = {p for p, n in pn.items() if n in ("Ascend Hardware", "Task Scheduler")}
    rows = []
    for e in ev:
        if e.get("pid") not in hw or e.get("cat") in STEP_CATS:
            continue
        a = e.get("args") or {}
        task = a.get("Task Type", "")
        name = e.get("name")
        rows.append(
            {
                "rank": rank,
                "step": step,
                "name": name,
                "type": op_type_from_name(name),
                "start_us": e.get("ts"),
                "dur_us": e.get("dur"),
                "stream": str(a.get("Physic Stream Id", a.get("Stream Id", e.get("tid")))),
                "core_type": task,
            }
        )
    df = pd.DataFrame(rows)
    if len(df):
        df["category"] = _category(df["core_type"], df["type"], df["name"], df["stream"])
    return df


def _hccl_iteration(path: Path, rank: int, step: int):
    """comm_ops / links / bandwidth rows of one hccl_<dev>_<model>_<iter>.json."""
    ev, pn, tn = _trace(path)
    kernel_tids = {k[1] for k, v in tn.items() if v and "Communication Kernel" in str(v)}
    planes = {k[1]: v for k, v in tn.items() if v and str(v).startswith("Plane")}
    main_plane = min(planes) if planes else None
    ops = [e for e in ev if e.get("tid") in kernel_tids or (not e.get("args") and e.get("tid") not in planes)]
    tasks = sorted((e for e in ev if e.get("args") and "task type" in e["args"]), key=lambda e: e["ts"])
    task_ts = np.array([t["ts"] for t in tasks], dtype=float)
    comm, links, bw = [], [], []
    for op in sorted(ops, key=lambda e: e.get("ts", 0)):
        t0, t1 = op["ts"], op["ts"] + op["dur"]
        lo, hi = np.searchsorted(task_ts, t0, side="left"), np.searchsorted(task_ts, t1, side="right")
        inside = tasks[lo:hi]
        wait = sum(t["dur"] for t in inside if t.get("tid") == main_plane and "Wait" in str(t["args"].get("task type")))
        data = [
            t for t in inside if str(t["args"].get("task type")) in DATA_TASKS and _num(t["args"].get("size(Byte)")) > 0
        ]
        transit = sum(t["dur"] for t in data if t.get("tid") == main_plane)
        entries = []
        for t in data:
            a = t["args"]
            src, dst = int(_num(a.get("src rank"))), int(_num(a.get("dst rank")))
            if dst == INVALID_RANK:
                dst = src
            lt = str(a.get("link type") or "")
            tr = lt if lt and lt != "INVALID_TYPE" else str(a.get("transport type") or "")
            entries.append((src, dst, tr, _num(a.get("size(Byte)")) / 1e6, t["dur"] / 1000.0))
        op_links, per_tr, payload_mb, group_size = link_rows(entries)
        name = op.get("name")
        comm.append(
            {
                "rank": rank,
                "step": step,
                "op_name": name,
                "op_type": comm_op_type(name) or "",
                "group": "",
                "group_size": group_size,
                "start_us": t0,
                "elapse_ms": op["dur"] / 1000.0,
                "wait_ms": wait / 1000.0,
                "transit_ms": transit / 1000.0,
                "idle_ms": max(op["dur"] - wait - transit, 0.0) / 1000.0,
                "size_bytes": payload_mb * 1e6,
            }
        )
        for lk in op_links:
            links.append({"step": step, "op_name": name, "group": "", **lk, "rank": rank})
        for tr, (mb, ms) in per_tr.items():
            bw.append({"rank": rank, "step": step, "op_name": name, "transport": tr, "size_mb": mb, "time_ms": ms})
    return comm, links, bw


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


# ---- units -------------------------------------------------------------------------------------------


def _parse_summary_dir(out_dir: Path, prof_dir: Path | None) -> dict:
    files = summary_files(out_dir)
    devs = sorted(d for d in (prof_dir.iterdir() if prof_dir else []) if d.is_dir() and d.name.startswith("device_"))
    info = device_info(devs[0]) if len(devs) == 1 else {}
    dev = device_id(devs[0]) if len(devs) == 1 else None
    if not any(k in files for k in ("op_summary", "task_time", "msprof", "step_trace", "op_statistic")):
        raise ProfileFormatError(
            out_dir, "no msprof summary files (op_summary_*.csv, task_time_*.csv, msprof_*.json) found"
        )
    # device id from the CSVs when there is no device folder
    if dev is None:
        for kind in ("op_summary", "task_time", "op_statistic"):
            if kind in files:
                head = read_table(files[kind][0], [], what=f"{kind} CSV")
                if "Device_id" in head.columns and len(head):
                    ids = pd.to_numeric(head["Device_id"], errors="coerce").dropna().unique()
                    if len(ids) == 1:
                        dev = int(ids[0])
                break
    rank, device = _rank_of(info, dev, None)
    res = {
        "rank": rank,
        "device": device,
        "ops": None,
        "steps": [],
        "ref": [],
        "comm": [],
        "links": [],
        "bw": [],
        "meta": {},
    }
    if "op_summary" in files:
        res["ops"] = _ops_from_op_summary(files["op_summary"], rank)
    elif "task_time" in files:
        res["ops"] = _ops_from_task_time(files["task_time"], rank)
    ev = pn = None
    if "msprof" in files and (res["ops"] is None or "step_trace" not in files):
        ev, pn = [], {}
        for p in files["msprof"]:
            e, n, _ = _trace(p)
            ev += e
            pn.update(n)
        if res["ops"] is None:
            res["ops"] = _ops_from_hardware(ev, pn, rank)
    if "step_trace" in files:
        st, ref = _steps_from_step_trace_csv(files["step_trace"], rank)
        res["steps"], res["ref"] = st.to_dict("records"), ref.to_dict("records")
    elif ev is not None:
        res["steps"], res["ref"] = _steps_from_events(ev, rank, files["msprof"][0])
    for kind in ("op_statistic", "communication_statistic", "api_statistic"):
        rec = _records(files.get(kind), f"{kind} CSV")
        if rec is not None:
            res["meta"][kind] = rec
    res["meta"]["files"] = {k: [str(p) for p in v] for k, v in files.items()}
    if info:
        res["meta"]["device_info"] = _device_meta(info)
    ops = res["ops"]
    if ops is not None and len(ops):
        c = ops[ops["category"] == "communication"]
        for r in c.itertuples(index=False):
            res["comm"].append(
                {
                    "rank": rank,
                    "op_name": r.name,
                    "op_type": comm_op_type(r.type) or comm_op_type(r.name) or "",
                    "group": "",
                    "start_us": r.start_us,
                    "elapse_ms": r.dur_us / 1000.0,
                }
            )
    return res


def _device_meta(info: dict) -> dict:
    d = (info.get("DeviceInfo") or [{}])[0] if isinstance(info.get("DeviceInfo"), list) else {}
    pv = str(info.get("platform_version", ""))
    return {
        "ai_core_num": d.get("ai_core_num"),
        "aiv_num": d.get("aiv_num"),
        "aic_frequency": d.get("aic_frequency"),
        "platform_version": pv,
        "npu": {"1": "Ascend910", "5": "Ascend910B"}.get(pv, pv or None),
        "hostname": info.get("hostname"),
        "rank_id": info.get("rank_id"),
    }


def _parse_timeline_dev(dev_dir: Path) -> dict:
    info = device_info(dev_dir)
    dev = device_id(dev_dir)
    rank, device = _rank_of(info, dev, None)
    by_kind: dict[str, dict[int, list[Path]]] = {}
    for p in sorted((dev_dir / "timeline").iterdir()):
        m = _TL_RX.match(p.name)
        if m:
            by_kind.setdefault(m.group(1), {}).setdefault(int(m.group(4)), []).append(p)
    iterations = sorted(set().union(*[set(v) for v in by_kind.values()]))
    res = {
        "rank": rank,
        "device": device,
        "ops": None,
        "steps": [],
        "ref": [],
        "comm": [],
        "links": [],
        "bw": [],
        "inputs": [],
        "warnings": [],
        "meta": {"device_info": _device_meta(info) if info else {}, "timeline_iterations": iterations},
    }
    where = f"rank {rank} ({dev_dir}/timeline)"
    # every step_trace_* file may repeat earlier iterations: one event each
    seen, st_ev = set(), []
    for it, paths in sorted(by_kind.get("step_trace", {}).items()):
        for p in paths:
            ev, _, _ = _trace(p)
            for e in ev:
                key = (e.get("cat"), e.get("name"), e.get("ts"))
                if key not in seen:
                    seen.add(key)
                    st_ev.append(e)
    if st_ev:
        res["steps"], res["ref"] = _steps_from_events(st_ev, rank, by_kind["step_trace"][min(by_kind["step_trace"])][0])
    ops, overlap = [], []
    src_kind = "task_time" if "task_time" in by_kind else ("msprof" if "msprof" in by_kind else None)
    for it, paths in sorted(by_kind.get("msprof", {}).items()):
        for p in paths:
            ev, pn, tn = _trace(p)
            overlap += _overlap_events(ev, pn, tn)
            if src_kind == "msprof":
                df = _ops_from_hardware(ev, pn, rank, step=it)
                if len(df):
                    ops.append(df)
    for it, paths in sorted(by_kind.get("task_time", {}).items()):
        for p in paths:
            ev, pn, _ = _trace(p)
            df = _ops_from_hardware(ev, pn, rank, step=it)
            if len(df):
                ops.append(df)
    res["ops"] = pd.concat(ops, ignore_index=True) if ops else None
    if overlap and res["ref"]:
        _overlap_reference(res["ref"], res["steps"], overlap)
    for it, paths in sorted(by_kind.get("hccl", {}).items()):
        for p in paths:
            c, li, b = _hccl_iteration(p, rank, it)
            res["comm"] += c
            res["links"] += li
            res["bw"] += b
    if res["comm"] and src_kind == "task_time":
        # task_time holds only tasks: the collectives (hccl_*) join the ops as communication
        # kernels so that step breakdowns see them
        kern = pd.DataFrame(
            {
                "rank": rank,
                "step": [c["step"] for c in res["comm"]],
                "name": [c["op_name"] for c in res["comm"]],
                "type": [op_type_from_name(c["op_name"]) for c in res["comm"]],
                "category": "communication",
                "start_us": [c["start_us"] for c in res["comm"]],
                "dur_us": [c["elapse_ms"] * 1000.0 for c in res["comm"]],
                "stream": "HCCL",
                "core_type": "HCCL",
            }
        )
        res["ops"] = pd.concat([res["ops"], kern], ignore_index=True) if res["ops"] is not None else kern
    # what this rank was read from, and what it lacks
    for kind in ("step_trace", "task_time", "msprof", "hccl"):
        if kind in by_kind:
            res["inputs"].append(f"timeline/{kind}_*.json ({len(by_kind[kind])} iterations)")
            missing = [i for i in iterations if i not in by_kind[kind]]
            if missing:
                res["warnings"].append(
                    f"{where}: no {kind}_*_{{iteration}}.json for iteration(s) {_ranges(missing)}: {_LOST[kind]} there"
                )
    if "step_trace" not in by_kind:
        res["warnings"].append(f"{where}: no step_trace_*.json: {_LOST['step_trace']}")
    if src_kind is None:
        res["warnings"].append(f"{where}: neither task_time_*.json nor msprof_*.json: {_LOST['task_time']}")
    has_hccl_tasks = res["ops"] is not None and (res["ops"]["category"] == "communication_task").any()
    if "hccl" not in by_kind and (has_hccl_tasks or "hccl" in _kinds_of_siblings(dev_dir)):
        res["warnings"].append(f"{where}: no hccl_*.json: {_LOST['hccl']}")
    return res


#: what a rank loses without each timeline kind
_LOST = {
    "step_trace": "step windows and the profiler's breakdown unknown",
    "task_time": "no op data (computing unknown)",
    "msprof": "no op data and no Overlap Analysis (computing unknown)",
    "hccl": "collectives (time split, sizes, links) unknown",
}


def _kinds_of_siblings(dev_dir: Path) -> set[str]:
    """Timeline kinds the other device_N folders of the same job (or of sibling PROF_* jobs) hold."""
    kinds: set[str] = set()
    job = dev_dir.parent
    for d in [*job.iterdir(), *[x for j in job.parent.iterdir() if j.is_dir() and j != job for x in j.iterdir()]]:
        if d.is_dir() and d != dev_dir and d.name.startswith("device_") and (d / "timeline").is_dir():
            for p in (d / "timeline").iterdir():
                m = _TL_RX.match(p.name)
                if m:
                    kinds.add(m.group(1))
    return kinds


def _ranges(nums: list[int]) -> str:
    out, start, prev = [], None, None
    for n in sorted(nums):
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out)


#: threads of the profiler's "Overlap Analysis" process -> reference breakdown columns
OVERLAP_THREADS = {
    "Computing": "computing_us",
    "Communication": "communication_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Free": "overlap_free_us",
}


def _overlap_events(ev, pn, tn) -> list[tuple[str, float, float]]:
    """(reference column, ts, dur) of the profiler's own Overlap Analysis events."""
    pids = {p for p, n in pn.items() if n == "Overlap Analysis"}
    out = []
    for e in ev:
        if e.get("pid") in pids:
            col = OVERLAP_THREADS.get(str(tn.get((e.get("pid"), e.get("tid")), "")))
            if col:
                out.append((col, float(e["ts"]), float(e["dur"])))
    return out


def _overlap_reference(ref: list[dict], steps: list[dict], overlap) -> None:
    """Add the profiler's Overlap Analysis sums per step window to `ref` (in place):
    computing, communication, communication not overlapped (sums of the profiler's own merged
    intervals), overlapped = communication - not overlapped, free = step - computing - not overlapped
    (the step window includes the gap between iterations)."""
    win = sorted((s["start_us"], s["end_us"], s["step"]) for s in steps)
    starts = np.array([w[0] for w in win])
    sums: dict[int, dict[str, float]] = {}
    for col, ts, dur in overlap:
        i = int(np.searchsorted(starts, ts, side="right")) - 1
        if i < 0 or ts >= win[i][1]:
            continue
        d = sums.setdefault(win[i][2], {})
        d[col] = d.get(col, 0.0) + dur
    for r in ref:
        d = sums.get(r["step"])
        if not d:
            continue
        for col in OVERLAP_THREADS.values():
            r[col] = d.get(col, 0.0)
        r["overlapped_us"] = r["communication_us"] - r["communication_not_overlapped_us"]
        r["free_us"] = r["step_us"] - r["computing_us"] - r["communication_not_overlapped_us"]


def parse(path) -> Profile:
    """Parse msprof output under `path` (a PROF_* folder, its mindstudio_profiler_output/, a device_N
    folder, or a folder holding several of them) into one Profile."""
    path = Path(path)
    if not path.exists():
        raise ProfileFormatError(path, "no such file or directory")
    if path.is_file():
        path = path.parent
    units = _units(path)
    if not units:
        raise ProfileFormatError(path, "no msprof output (mindstudio_profiler_output/ or device_N/timeline/) found")
    parts, dirs = [], []
    for u in units:
        if u.name == OUT_DIR:
            parts.append(
                _parse_summary_dir(u, u.parent if (u.parent / OUT_DIR) == u and _has_devices(u.parent) else None)
            )
            dirs.append(u)
        elif (u / OUT_DIR).is_dir():
            parts.append(_parse_summary_dir(u / OUT_DIR, u))
            dirs.append(u)
        elif u.name.startswith("device_"):
            parts.append(_parse_timeline_dev(u))
            dirs.append(u)
        else:
            for d in sorted(c for c in u.iterdir() if c.is_dir() and c.name.startswith("device_") and _timeline_dir(c)):
                parts.append(_parse_timeline_dev(d))
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
    links = pd.DataFrame([x for p in parts for x in p["links"]])
    if len(links):
        links["bandwidth_gbps"] = bandwidth_gbps(links["size_mb"], links["time_ms"])
        links = conform(links, LINKS)
    else:
        links = empty(LINKS)
    bw = pd.DataFrame([x for p in parts for x in p["bw"]])
    if len(bw):
        bw["bandwidth_gbps"] = bandwidth_gbps(bw["size_mb"], bw["time_ms"])
        bw = conform(bw, COMM_BANDWIDTH)
    else:
        bw = empty(COMM_BANDWIDTH)
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
