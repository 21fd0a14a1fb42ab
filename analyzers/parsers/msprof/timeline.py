"""msprof's older per-iteration export `PROF_*/device_N/timeline/*.json`: one rank's ops, steps, collectives
(hccl_*), links and the profiler's Overlap Analysis, with a warning for each kind or iteration it lacks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.msprof.common import comm_op_type, link_rows, op_type_from_name
from analyzers.parsers.msprof.events import ops_from_hardware, steps_from_events, trace
from analyzers.parsers.msprof.files import TIMELINE_RX, device_id, device_info, device_meta, rank_part

#: HCCL task types that move data (the rest are notifications)
DATA_TASKS = {"Memcpy", "Reduce_Inline", "Reduce Inline", "RDMASend", "RDMA_Send", "Inline_Reduce"}
INVALID_RANK = 4294967295


def parse_timeline_dev(dev_dir: Path) -> dict:
    info = device_info(dev_dir)
    dev = device_id(dev_dir)
    res = rank_part(info, dev)
    rank = res["rank"]
    by_kind: dict[str, dict[int, list[Path]]] = {}
    for p in sorted((dev_dir / "timeline").iterdir()):
        m = TIMELINE_RX.match(p.name)
        if m:
            by_kind.setdefault(m.group(1), {}).setdefault(int(m.group(4)), []).append(p)
    iterations = sorted(set().union(*[set(v) for v in by_kind.values()]))
    res["meta"] = {"device_info": device_meta(info) if info else {}, "timeline_iterations": iterations}
    # every step_trace_* file may repeat earlier iterations: one event each
    seen, st_ev = set(), []
    for it, paths in sorted(by_kind.get("step_trace", {}).items()):
        for p in paths:
            ev, _, _ = trace(p)
            for e in ev:
                key = (e.get("cat"), e.get("name"), e.get("ts"))
                if key not in seen:
                    seen.add(key)
                    st_ev.append(e)
    if st_ev:
        res["steps"], res["ref"] = steps_from_events(st_ev, rank, by_kind["step_trace"][min(by_kind["step_trace"])][0])
    ops, overlap = [], []
    src_kind = "task_time" if "task_time" in by_kind else ("msprof" if "msprof" in by_kind else None)
    for it, paths in sorted(by_kind.get("msprof", {}).items()):
        for p in paths:
            ev, pn, tn = trace(p)
            overlap += _overlap_events(ev, pn, tn)
            if src_kind == "msprof":
                df = ops_from_hardware(ev, pn, rank, step=it)
                if len(df):
                    ops.append(df)
    for it, paths in sorted(by_kind.get("task_time", {}).items()):
        for p in paths:
            ev, pn, _ = trace(p)
            df = ops_from_hardware(ev, pn, rank, step=it)
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
    _inputs_and_gaps(res, dev_dir, by_kind, iterations, src_kind)
    return res


def _inputs_and_gaps(res: dict, dev_dir: Path, by_kind: dict, iterations: list[int], src_kind: str | None) -> None:
    """What this rank was read from (`res["inputs"]`), and a warning for each kind or iteration it lacks."""
    where = f"rank {res['rank']} ({dev_dir}/timeline)"
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
                m = TIMELINE_RX.match(p.name)
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


def _hccl_iteration(path: Path, rank: int, step: int):
    """comm_ops / links / bandwidth rows of one hccl_<dev>_<model>_<iter>.json."""
    ev, pn, tn = trace(path)
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
