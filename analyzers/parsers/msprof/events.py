"""msprof's Chrome-trace JSON (`msprof_*.json`, `device_N/timeline/*.json`): reading it, its task categories, its
ops (Ascend Hardware / Task Scheduler events) and its steps (`Iteration N` events)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.msprof.common import comm_op_type, op_type_from_name
from analyzers.parsers.trace_view import iter_events
from perfbench.errors import ProfileFormatError

COMPUTE_TASKS = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "AIV", "AIC", "FFTS_PLUS", "DSA"}
COMM_TASKS = ("COMMUNICATION", "HCCL")
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


def category(task_type: pd.Series, op_type: pd.Series, name: pd.Series, stream: pd.Series | None = None) -> np.ndarray:
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


def trace(path: Path):
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


def steps_from_events(ev: list[dict], rank: int, path: Path):
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
    steps = iteration_windows(pd.DataFrame(steps)).to_dict("records") if steps else []
    for st in steps:
        r = ref[st["step"]]
        r["step_us"] = st["end_us"] - st["start_us"]
        gap = r["step_us"] - r["iteration_time_us"]
        r["data_aug_bound_us"] = gap if abs(gap) > 1e-3 else 0.0
    return steps, [r for r in ref.values() if "step_us" in r]


def iteration_windows(steps: pd.DataFrame) -> pd.DataFrame:
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


def ops_from_hardware(ev, pn, rank: int, step: int | None = None) -> pd.DataFrame:
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
        df["category"] = category(df["core_type"], df["type"], df["name"], df["stream"])
    return df
