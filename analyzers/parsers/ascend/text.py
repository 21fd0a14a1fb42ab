"""Parser for one rank of the Ascend profiler *text* export (MindSpore `*_ascend_ms`, torch_npu `*_ascend_pt`).

Reads, from `<rank_dir>/ASCEND_PROFILER_OUTPUT/`:

* kernel_details.csv   -> ops (every device kernel; HCCL rows are category "communication")
* step_trace_time.csv  -> reference_breakdown (what the profiler itself computed; used for reconciliation)
* communication.json   -> comm_ops (+ comm_bandwidth per transport)
* communication_matrix.json -> links
* op_statistic.csv     -> meta["op_statistic"] (cross-check for the kernels analysis)
* trace_view.json      -> host step starts (ProfilerStep#N, for Preparing) and collective sizes
                          (HCCL op `count` x `data_type`); streamed, skipped above `TRACE_MAX_BYTES`
                          when read_trace="auto"
and `<rank_dir>/profiler_info*.json`, `profiler_metadata.json` for rank id and parallel groups.

and, when step_trace_time.csv or the communication files are missing, `analysis.db` (StepTraceTime,
CommAnalyzer*: the db export of the same analyses).

Every file is optional: a rank holding only step_trace_time.csv and the communication files is a rank
(its breakdown is the profiler's, its kernels unknown). A damaged file becomes a warning naming it and
the rank is analyzed with the rest; `ranks.inputs` lists the files used. Headers are matched by name;
unknown columns are kept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.ascend.common import (
    OUTPUT_DIR,
    SKIPPED,
    RankInputs,
    base_meta,
    categorize,
    comm_op_type,
    device_step_windows,
    na_to_none,
    rank_info,
    read_csv,
    read_json,
    read_small_csv,
    step_of,
)
from analyzers.memory_summary import rank_summary
from analyzers.parsers.ascend.db import read_analysis_db
from analyzers.parsers.ascend.memory import no_memory, read_text_memory
from analyzers.parsers.ascend.trace_facts import trace_facts
from analyzers.schema import COMM_BANDWIDTH, COMM_OPS, LINKS, OPS, RANKS, STEPS, Columns, Profile, conform, empty
from perfbench.errors import ProfileFormatError

#: with read_trace="auto", trace_view.json files larger than this are not read (Preparing and
#: collective sizes are then unknown); pass read_trace=True to force.
TRACE_MAX_BYTES = 512 * 1024 * 1024

KERNEL_REQUIRED = {"Name": "name", "Start Time(us)": "start_us", "Duration(us)": "dur_us"}
KERNEL_OPTIONAL = {
    "Step Id": "step",
    "Type": "type",
    "Accelerator Core": "core_type",
    "Stream ID": "stream",
    "Device_id": "device",
    "Task Type": "task_type",
}

STEP_TRACE_REQUIRED = {
    "Step": "step",
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
}
STEP_TRACE_OPTIONAL = {
    "Stage": "stage_us",
    "Bubble": "bubble_us",
    "Preparing": "preparing_us",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_exclude_receive_us",
    "Device_id": "device",
}

#: files that make a folder's ASCEND_PROFILER_OUTPUT/ a rank (any one is enough: a rank is analyzed with what it has)
RANK_FILES = (
    "kernel_details.csv",
    "trace_view.json",
    "step_trace_time.csv",
    "communication.json",
    "communication_matrix.json",
    "analysis.db",
)


def is_text_rank(d: Path) -> bool:
    out = d / OUTPUT_DIR
    return out.is_dir() and any((out / f).exists() for f in RANK_FILES)


def parse_text_rank(
    rank_dir: str | Path,
    *,
    rank: int | None = None,
    read_trace="auto",
    fit: bool = True,
    read_kernels: bool = True,
    columns: bool = False,
    memory_detail: bool = True,
    read_sizes: bool = False,
) -> Profile:
    """One rank's text export as a Profile, from whatever of its files are there and readable.

    Each file is optional: a missing file leaves its tables empty, a damaged one becomes a warning
    naming it (`Profile.warnings`) and the rank keeps what its other files give. `ranks.inputs` lists the
    files used. Only a rank with no readable file at all is an error. `read_kernels=False` skips
    kernel_details.csv and trace_view.json when the profiler's step trace is there (a large cluster's
    ranks beyond the cross-check sample, see analyzers.parsers.load). `fit=False` leaves tables
    unconformed (load_profile conforms once after merging many ranks); `columns=True` (with fit=False) leaves
    the small tables (ranks, communication, links, the step trace) as `Columns`, which load_profile turns
    into one DataFrame per table across ranks. `memory_detail=False` (a large cluster's import):
    memory_record.csv alone is read, reduced to the rank's peaks (meta["memory_summary"],
    `analyzers.memory_summary.rank_summary`), and the memory tables left empty. `read_sizes` (with
    `read_kernels=False`): trace_view.json is still read, for the collective sizes and algorithms only (a
    summary-mode cluster's sample ranks: no kernels, no device ops)."""
    rank_dir = Path(rank_dir)
    if rank_dir.name == OUTPUT_DIR:
        rank_dir = rank_dir.parent
    out = rank_dir / OUTPUT_DIR
    info = rank_info(rank_dir)
    r = info["rank"] if info["rank"] is not None else (rank if rank is not None else 0)
    meta = _rank_meta(rank_dir, out, info)
    io = RankInputs()

    kd, tv, st = out / "kernel_details.csv", out / "trace_view.json", out / "step_trace_time.csv"
    ref = io.read(st, _step_trace, r, need_rows=True) if st.exists() else None
    skip = not read_kernels and ref is not None
    if skip:
        meta["kernels_skipped"] = SKIPPED
    ops = io.read(kd, _kernel_details, r, need_rows=True) if kd.exists() and not skip else None
    if ref is not None:
        meta["reference_source"] = "step_trace_time.csv"
    ref, comm_ops, comm_bw, links = _read_communication(io, out, r, ref, meta)
    trace = _read_trace(io, tv, r, read_trace, skip=skip, read_sizes=read_sizes, have_ops=ops is not None, meta=meta)
    if ops is None and trace is not None and trace["device_ops"] is not None:
        ops = trace["device_ops"]
    if (
        ops is not None
        and trace is not None
        and not (ops["category"] == "communication").any()
        and len(trace["hccl_ops"])
    ):  # communication rows missing from kernel_details (some exports)
        ops = pd.concat([ops, trace["hccl_ops"]], ignore_index=True)
    if not io.used:
        problems = "; ".join(io.warnings) if io.warnings else "none of " + ", ".join(RANK_FILES) + " found"
        raise ProfileFormatError(out, f"no readable profiler data ({problems})")

    ops, steps = _ops_and_steps(ops, trace, ref, r, columns)
    if comm_ops is None:
        comm_ops, comm_bw = _comm_from_ops(ops, r), Columns()
        meta["comm_source"] = "kernel_details (elapse only)" if len(comm_ops) else "none"
    else:
        meta["comm_source"] = "communication.json" if "communication.json" in io.used else "analysis.db CommAnalyzer*"
    if trace is not None and len(comm_ops):
        comm_ops = _frame(comm_ops, COMM_OPS)
        size = comm_ops["op_name"].map(trace["hccl_sizes"])
        comm_ops["size_bytes"] = comm_ops["size_bytes"].fillna(size) if "size_bytes" in comm_ops else size
        comm_ops["alg_type"] = comm_ops["op_name"].map(trace["hccl_alg"])
    if (out / "op_statistic.csv").exists() and not skip:  # the kernels' cross-check: read with the kernels
        _op_statistic(io, out / "op_statistic.csv", meta)
    memory = _rank_memory(out, r, io, memory_detail=memory_detail, columns=columns, meta=meta)
    row = {"device": _device(ops, info), "path": str(rank_dir), "world_size": info.get("world_size")}
    tables = {"steps": steps, "ops": ops, "comm_ops": comm_ops, "comm_bandwidth": comm_bw, "links": links}
    return _rank_profile(r, row, tables, memory, ref, meta, io, columns=columns, fit=fit)


def _rank_profile(
    r: int, row: dict, t: dict, memory: dict, ref, meta: dict, io: RankInputs, *, columns: bool, fit: bool
) -> Profile:
    """The rank's Profile from its tables (`Columns` kept with `columns`, else DataFrames, conformed with `fit`)."""
    ranks = Columns()
    ranks.append(
        {
            "rank": r,
            "host": None,
            "device": row["device"],
            "path": row["path"],
            "stage": pd.NA,
            "dp_group": None,
            "world_size": row["world_size"],
            "inputs": io.text,
        }
    )
    tables = {
        "ranks": (ranks, RANKS),
        "steps": (t["steps"], STEPS),
        "ops": (t["ops"], OPS),
        "comm_ops": (t["comm_ops"], COMM_OPS),
        "comm_bandwidth": (t["comm_bandwidth"] if t["comm_bandwidth"] is not None else Columns(), COMM_BANDWIDTH),
        "links": (t["links"] if t["links"] is not None else Columns(), LINKS),
    }
    if columns:
        got = {k: tab for k, (tab, _) in tables.items()}
    else:
        got = {k: _frame(tab, schema) for k, (tab, schema) in tables.items()}
        if fit:
            got = {k: conform(tab, tables[k][1]) for k, tab in got.items()}  # (load_profile conforms merged tables)
        ref = _frame(ref) if ref is not None else None
    meta["input_problems"] = io.problems
    return Profile(
        source="ascend-text",
        path=row["path"],
        **got,
        **memory,
        reference_breakdown=ref,
        meta=meta,
        warnings=io.warnings,
    )


def _rank_meta(rank_dir: Path, out: Path, info: dict) -> dict:
    """A rank's meta from its folder and profiler_info / profiler_metadata: format, config, parallel groups,
    versions, producer and the rank files present."""
    meta = base_meta("ascend-text", rank_dir, info)
    meta["files_present"] = sorted(f for f in RANK_FILES if (out / f).exists())
    for k in ("torch_npu_version", "cann_version", "mindspore_version", "ms_version"):
        if k in info:
            meta[k] = info[k]
    meta["producer"] = (
        "mindspore"
        if rank_dir.name.endswith("_ascend_ms")
        else ("torch_npu" if rank_dir.name.endswith("_ascend_pt") else "unknown")
    )
    return meta


def _read_communication(io: RankInputs, out: Path, r: int, ref, meta: dict) -> tuple:
    """(step trace, comm ops, comm bandwidth, links) from communication.json and communication_matrix.json, what is
    missing of them (and of the step trace) taken from analysis.db, the db export of the same analyses."""
    comm_ops = comm_bw = None
    if (out / "communication.json").exists():
        got = io.read(out / "communication.json", _communication, r)
        if got is not None:
            comm_ops, comm_bw = got
    links = (
        io.read(out / "communication_matrix.json", _matrix, r) if (out / "communication_matrix.json").exists() else None
    )
    adb = out / "analysis.db"
    if adb.exists() and (ref is None or comm_ops is None or links is None):
        got = io.read(adb, read_analysis_db, r)
        if got is not None:
            a_co, a_cb, a_links, a_ref = got
            if ref is None and a_ref is not None:
                ref, meta["reference_source"] = a_ref, "analysis.db StepTraceTime"
            if comm_ops is None and a_co is not None and len(a_co):
                comm_ops, comm_bw = a_co, a_cb
            if links is None and len(a_links):
                links = a_links
    return ref, comm_ops, comm_bw, links


def _read_trace(io: RankInputs, tv: Path, r: int, read_trace, *, skip: bool, read_sizes: bool, have_ops: bool, meta):
    """trace_view.json's facts (`trace_facts`) when it is to be read: for the sizes only when the kernels are
    skipped (`read_sizes`), in full when there is no kernel_details.csv; None otherwise."""
    if not tv.exists():
        return None
    small = read_trace is True or (read_trace == "auto" and tv.stat().st_size <= TRACE_MAX_BYTES)
    if skip:
        if not (read_sizes and small):
            return None
        trace = io.read(tv, trace_facts, r, full=False)
        if trace is not None:  # the sizes only: the kernels stay unread
            trace = {**trace, "device_ops": None, "hccl_ops": empty(OPS), "host_steps": {}}
        return trace
    if small or (not have_ops and read_trace != False):  # noqa: E712
        return io.read(tv, trace_facts, r, full=not have_ops)
    meta["trace_view_skipped"] = f"{tv.stat().st_size / 1e9:.2f} GB > read limit; Preparing and sizes unknown"
    return None


def _ops_and_steps(ops, trace, ref, r: int, columns: bool):
    """(ops with their step numbers, steps: each step's device span and host window) of a rank's kernels; empty
    tables (`Columns` with `columns`) without kernels."""
    if ops is None:
        return (Columns(), Columns()) if columns else (empty(OPS), empty(STEPS))
    if ops["step"].notna().any():
        ops["step"] = ops["step"].astype("Int64")
    else:  # one profiled step and no Step Id column: the step trace names it
        one = int(_frame(ref)["step"].iloc[0]) if ref is not None and len(ref) == 1 else 0
        ops["step"] = pd.array([one] * len(ops), dtype="Int64")
    steps = device_step_windows(ops["step"], ops["start_us"], ops["start_us"] + ops["dur_us"])
    steps.insert(0, "rank", r)
    if trace is not None and trace["host_steps"]:
        hs = trace["host_steps"]
        steps["host_start_us"] = steps["step"].map(lambda s: hs.get(int(s), (np.nan, np.nan))[0])
        steps["host_end_us"] = steps["step"].map(lambda s: hs.get(int(s), (np.nan, np.nan))[1])
    return ops, steps


def _op_statistic(io: RankInputs, path: Path, meta: dict) -> None:
    """op_statistic.csv's rows into meta["op_statistic"] (the kernels analysis's cross-check)."""
    stat = io.read(
        path,
        read_csv,
        {"OP Type": "op_type", "Total Time(us)": "total_us"},
        {"Core Type": "core_type", "Count": "count"},
        numeric=("total_us", "count"),
    )
    if stat is not None:
        meta["op_statistic"] = stat[[c for c in ("op_type", "core_type", "count", "total_us") if c in stat]].to_dict(
            "records"
        )


def _rank_memory(out: Path, r: int, io: RankInputs, *, memory_detail: bool, columns: bool, meta: dict) -> dict:
    """The rank's memory tables; in summary mode (`memory_detail=False`) its memory numbers only
    (meta["memory_summary"]), its records read again on demand (show --rank), and the tables left empty."""
    if memory_detail:
        return {**no_memory(), **read_text_memory(out, r, io, columns=columns)}
    got = read_text_memory(out, r, io, columns=True, arrow_text=True, peaks_only=True)
    if got:
        meta["memory_summary"] = rank_summary(
            *(got[k].data if k in got else None for k in ("memory_records", "op_memory", "module_memory"))
        )
    if columns:  # empty tables load_profile merges (no DataFrame built per rank)
        return {k: Columns() for k in ("memory_records", "op_memory", "module_memory")}
    return no_memory()


def _frame(t, schema: dict | None = None) -> pd.DataFrame:
    """A table as a DataFrame: Columns built (an empty one as the schema's empty table), a DataFrame as is."""
    if not isinstance(t, Columns):
        return t
    if not len(t) and schema is not None:
        return empty(schema)
    return t.frame({"step": "Int64"} if schema is not None and schema.get("step") == "Int64" else None)


def _device(ops, info: dict):
    if isinstance(ops, pd.DataFrame) and "device" in ops.columns and ops["device"].notna().any():
        return str(ops["device"].dropna().iloc[0])
    return None


def read_kernel_details(path: str | Path, rank: int = 0) -> pd.DataFrame:
    """kernel_details.csv (any header variant) as OPS rows plus the file's extra columns."""
    return _kernel_details(Path(path), rank)


def _kernel_details(path: Path, r: int) -> pd.DataFrame:
    df = read_csv(path, KERNEL_REQUIRED, KERNEL_OPTIONAL, numeric=("start_us", "dur_us", "step"))
    for c in ("type", "core_type", "name", "stream", "device"):
        if c in df.columns:  # text columns even when every cell was N/A (inferred as float NaN)
            df[c] = na_to_none(df[c])
    if "stream" in df.columns:
        df["stream"] = df["stream"].map(lambda v: None if v is None else str(v))
    df["category"] = categorize(df["name"], df.get("core_type"), df.get("type"))
    if "type" not in df.columns:
        df["type"] = None
    # comm ops: normalized collective type when the profiler left Type empty / N/A
    comm = df["category"] == "communication"
    if comm.any():
        df.loc[comm, "type"] = df.loc[comm, "type"].fillna(df.loc[comm, "name"].map(comm_op_type))
    if "step" not in df.columns:
        df["step"] = np.nan
    df.insert(0, "rank", r)
    # AI Core metrics: keep numeric where they are numeric
    for c in df.columns:
        if (
            c.startswith(("aic_", "aiv_", "cube_utilization"))
            or c in ("Wait Time(us)", "Block Dim", "Block Num", "Mix Block Dim", "Mix Block Num")
        ) and not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = pd.to_numeric(df[c].astype(str).str.strip().replace({"N/A": None}), errors="coerce")
    return df


_STEP_TRACE_NUMERIC = tuple(
    v for v in {**STEP_TRACE_REQUIRED, **STEP_TRACE_OPTIONAL}.values() if v not in ("step", "device")
)


def _step_trace(path: Path, r: int):
    """step_trace_time.csv with a `rank` column: `Columns` for a plain file (the usual case), else a DataFrame."""
    cols = read_small_csv(path, STEP_TRACE_REQUIRED, STEP_TRACE_OPTIONAL, _STEP_TRACE_NUMERIC, ("step", "device"))
    if cols is not None:
        return Columns({"rank": [r] * len(cols), **cols.data}, len(cols))
    df = read_csv(path, STEP_TRACE_REQUIRED, STEP_TRACE_OPTIONAL, numeric=_STEP_TRACE_NUMERIC)
    df["step"] = df["step"].map(lambda s: step_of(s) if step_of(s) is not None else 0).astype("int64")
    df.insert(0, "rank", r)
    return df


def _communication(path: Path, r: int) -> tuple[Columns, Columns]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise ProfileFormatError(path, f"expected a JSON object keyed by step, found {type(data).__name__}")
    rows, bw = Columns(), Columns()
    moved: dict[str, float] = {}  # payload moved by this rank per op name (sum over device-to-device transports)
    for step_key, kinds in data.items():
        if not isinstance(kinds, dict):
            raise ProfileFormatError(
                path, f"'{step_key}' should map to {{collective, p2p}}, found {type(kinds).__name__}"
            )
        step = step_of(step_key)
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                raise ProfileFormatError(path, f"'{step_key}/{kind}' should be an object of ops")
            for key, op in ops.items():
                if key == "Total Op Info":
                    continue
                if not isinstance(op, dict) or "Communication Time Info" not in op:
                    raise ProfileFormatError(
                        path, f"op '{key}' in '{step_key}/{kind}' has no 'Communication Time Info'"
                    )
                name, _, group = key.partition("@")
                t = op.get("Communication Time Info") or {}
                try:
                    rows.append(
                        {
                            "rank": r,
                            "step": step,
                            "op_name": name,
                            "op_type": comm_op_type(name),
                            "group": group,
                            "group_size": pd.NA,
                            **time_info(t),
                            "size_bytes": np.nan,
                            "kind": kind,
                            "wait_ratio": _f(t.get("Wait Time Ratio")),
                            "synchronization_ratio": _f(t.get("Synchronization Time Ratio")),
                        }
                    )
                except KeyError as exc:
                    raise ProfileFormatError(path, f"op '{key}': missing {exc.args[0]!r}") from None
                for transport, b in (op.get("Communication Bandwidth Info") or {}).items():
                    if not isinstance(b, dict):
                        continue
                    size, tm = _f(b.get("Transit Size(MB)")), _f(b.get("Transit Time(ms)"))
                    if not (size or tm):
                        continue
                    bw.append(
                        {
                            "rank": r,
                            "step": step,
                            "op_name": name,
                            "transport": transport,
                            "size_mb": size,
                            "time_ms": tm,
                            "bandwidth_gbps": _f(b.get("Bandwidth(GB/s)")),
                            "large_packet_ratio": _f(b.get("Large Packet Ratio")),
                            "group": group,
                        }
                    )
                    if transport in MOVED_TRANSPORTS and size == size:
                        moved[name] = moved.get(name, 0.0) + size
    if len(rows) and len(bw):  # SDMA aggregates HCCS/PCIE/SIO: not counted again
        rows.data["transit_bytes"] = [moved.get(name, 0.0) * 1e6 for name in rows.data["op_name"]]
    return rows, bw


def time_info(t: dict) -> dict:
    """An op's "Communication Time Info" (communication.json, msprof-analyze's cluster_communication.json) as
    comm_ops columns; KeyError without "Elapse Time(ms)"."""
    return {
        "start_us": _f(t.get("Start Timestamp(us)")),
        "elapse_ms": _f(t["Elapse Time(ms)"]),
        "transit_ms": _f(t.get("Transit Time(ms)")),
        "wait_ms": _f(t.get("Wait Time(ms)")),
        "synchronization_ms": _f(t.get("Synchronization Time(ms)")),
        "idle_ms": _f(t.get("Idle Time(ms)")),
    }


#: transports between devices whose sizes add up to what a rank moved in an op (SDMA aggregates HCCS/PCIE/SIO)
MOVED_TRANSPORTS = ("HCCS", "PCIE", "SIO", "RDMA")


def _f(v) -> float:
    if v is None or v == "":
        return float("nan")
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def _comm_from_ops(ops, r: int):
    if not isinstance(ops, pd.DataFrame) or not len(ops):
        return Columns()
    c = ops[ops["category"] == "communication"]
    if not len(c):
        return Columns()
    return pd.DataFrame(
        {
            "rank": r,
            "step": c["step"].astype("Int64").to_numpy(),
            "op_name": c["name"].to_numpy(),
            "op_type": c["name"].map(comm_op_type).to_numpy(),
            "group": "",
            "group_size": pd.NA,
            "start_us": c["start_us"].to_numpy(),
            "elapse_ms": (c["dur_us"] / 1000.0).to_numpy(),
            "transit_ms": np.nan,
            "wait_ms": np.nan,
            "synchronization_ms": np.nan,
            "idle_ms": np.nan,
            "size_bytes": np.nan,
        }
    )


def _matrix(path: Path, r: int) -> Columns:
    data = read_json(path)
    if not isinstance(data, dict):
        raise ProfileFormatError(path, f"expected a JSON object keyed by step, found {type(data).__name__}")
    rows: list[tuple] = []
    for step_key, kinds in data.items():
        if not isinstance(kinds, dict):
            raise ProfileFormatError(path, f"'{step_key}' should map to {{collective, p2p}}")
        step = step_of(step_key)
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                raise ProfileFormatError(path, f"'{step_key}/{kind}' should be an object of ops")
            for key, links in ops.items():
                if key == "Total Op Info" or not isinstance(links, dict):
                    continue
                name, _, group = key.partition("@")
                for pair, v in links.items():
                    src, _, dst = str(pair).partition("-")
                    if not isinstance(v, dict) or not src.strip().isdigit() or not dst.strip().isdigit():
                        raise ProfileFormatError(path, f"link '{pair}' of '{key}' is not 'src-dst' with an object")
                    rows.append(
                        (
                            step,
                            name,
                            group,
                            int(src),
                            int(dst),
                            v.get("Transport Type"),
                            _f(v.get("Transit Size(MB)")),
                            _f(v.get("Transit Time(ms)")),
                            _f(v.get("Bandwidth(GB/s)")),
                            v.get("Op Name"),
                            r,
                            kind,
                        )
                    )
    return Columns.from_rows(MATRIX_COLUMNS, rows)


MATRIX_COLUMNS = (
    "step",
    "op_name",
    "group",
    "src",
    "dst",
    "transport",
    "size_mb",
    "time_ms",
    "bandwidth_gbps",
    "hccl_op_name",
    "rank",
    "kind",
)
