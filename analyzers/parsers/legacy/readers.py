"""Readers of the legacy MindSpore 1.x profiler files, one rank's file each: step_trace_raw (steps, the profiler's
breakdown, collectives' timing), hccl_raw (collectives' wait/transit, sizes, links), the cluster analyse CSV,
framework_raw (op types) and output_timeline_data (ops)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.msprof.common import comm_op_type, link_rows, op_type_from_name
from analyzers.parsers.msprof.csvread import read_table, to_number, to_numbers
from perfbench.errors import ProfileFormatError

TICK_US = 0.01  # step_trace_raw timestamps are 10 ns ticks

# ---- step_trace_raw -------------------------------------------------------------------------

STEP_TRACE_REQUIRED = ["step_num", "start_point", "end_point", "total"]
STEP_TRACE_OPTIONAL = ["fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]


def read_step_trace(path: Path, rank: int):
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


def _floats(values: list, path: Path, problem: str) -> list[float]:
    """`values` as floats; a value that is not a number is `problem` in `path`."""
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise ProfileFormatError(path, problem) from None


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
            t_ms, size_kb = _floats(vals[:2], path, f"line {line}: {what}[{key}][{transport}] has non-numeric values")
            out.append((int(m.group(1)), int(m.group(2)), str(transport).upper(), t_ms, size_kb / 1000.0))
    return out


def read_hccl(path: Path, rank: int):
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
            cost, wait = _floats(v[1:3], path, f"line {i}: operator {op_name!r} has non-numeric cost/wait")
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


# ---- cluster analyse, framework_raw, output_timeline_data -----------------------------------------


def read_pipeline(path: Path, rank: int) -> pd.DataFrame:
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


def read_framework(path: Path) -> dict[str, str]:
    df = read_table(path, [], what="framework_raw CSV")
    name_col = next((c for c in ("full_kernel_name", "full_op_name", "op_name") if c in df.columns), None)
    type_col = next((c for c in ("kernel_type", "op_type") if c in df.columns), None)
    if name_col is None or type_col is None:
        raise ProfileFormatError(
            path, "required column 'full_op_name'/'full_kernel_name' or 'op_type'/'kernel_type' is missing"
        )
    return dict(zip(df[name_col], df[type_col]))


def read_timeline(path: Path, rank: int, types: dict[str, str]) -> pd.DataFrame:
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
