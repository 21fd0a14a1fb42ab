"""msprof's summary folder `mindstudio_profiler_output/`: op_summary / task_time / step_trace CSVs, msprof_*.json
when there are no CSVs, and the statistic CSVs kept as meta records; one rank's tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analyzers.parsers.msprof.common import comm_op_type, op_type_from_name
from analyzers.parsers.msprof.csvread import read_table, to_numbers
from analyzers.parsers.msprof.events import category, iteration_windows, ops_from_hardware, steps_from_events, trace
from analyzers.parsers.msprof.files import device_id, device_info, device_meta, rank_part, summary_files
from perfbench.errors import ProfileFormatError

OP_SUMMARY_REQUIRED = ["Op Name", "Task Start Time(us)", "Task Duration(us)"]
OP_SUMMARY_ALIASES = {"Block Dim": ["Block Num"], "Mix Block Dim": ["Mix Block Num"], "OP Type": ["Op Type"]}


def _read_parts(files: list[Path], required, **kw) -> pd.DataFrame:
    parts = [read_table(p, required, **kw) for p in files]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


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
            "category": category(task, typ, name),
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
            "category": category(task, name, name),
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
    steps = iteration_windows(pd.DataFrame({"rank": rank, "step": step, "start_us": end - dur, "end_us": end}))
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


def parse_summary_dir(out_dir: Path, prof_dir: Path | None) -> dict:
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
    res = rank_part(info, dev)
    rank = res["rank"]
    if "op_summary" in files:
        res["ops"] = _ops_from_op_summary(files["op_summary"], rank)
    elif "task_time" in files:
        res["ops"] = _ops_from_task_time(files["task_time"], rank)
    ev = pn = None
    if "msprof" in files and (res["ops"] is None or "step_trace" not in files):
        ev, pn = [], {}
        for p in files["msprof"]:
            e, n, _ = trace(p)
            ev += e
            pn.update(n)
        if res["ops"] is None:
            res["ops"] = ops_from_hardware(ev, pn, rank)
    if "step_trace" in files:
        st, ref = _steps_from_step_trace_csv(files["step_trace"], rank)
        res["steps"], res["ref"] = st.to_dict("records"), ref.to_dict("records")
    elif ev is not None:
        res["steps"], res["ref"] = steps_from_events(ev, rank, files["msprof"][0])
    for kind in ("op_statistic", "communication_statistic", "api_statistic"):
        rec = _records(files.get(kind), f"{kind} CSV")
        if rec is not None:
            res["meta"][kind] = rec
    res["meta"]["files"] = {k: [str(p) for p in v] for k, v in files.items()}
    if info:
        res["meta"]["device_info"] = device_meta(info)
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
