"""Parser for one rank of the Ascend profiler *.db* export (`ascend_pytorch_profiler_{rank}.db`,
`ascend_mindspore_profiler_{rank}.db`, plus `analysis.db`).

From the profiler db: TASK x COMPUTE_TASK_INFO (compute ops, with TASK_PMU_INFO AI Core metrics),
COMMUNICATION_OP (collectives, with count x data type = payload), STEP_TIME (host step windows),
RANK_DEVICE_MAP / NPU_INFO (identity); names through STRING_IDS. From analysis.db: StepTraceTime
(reference breakdown), CommAnalyzerTime / CommAnalyzerBandwidth / CommAnalyzerMatrix (per-op times,
bandwidth per transport, links).

SQLite files are opened read-only with `immutable=1`, so nothing (no -shm/-wal side file) is ever
written next to them; if a `-wal` file exists the db and its WAL are copied to a temp dir first.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.parsers.ascend.common import (
    DTYPE_BYTES,
    OUTPUT_DIR,
    SKIPPED,
    RankInputs,
    base_meta,
    link_keys,
    comm_op_type,
    device_step_windows,
    na_to_none,
    rank_info,
    step_of,
)
from analyzers.groups import add_db_meta
from analyzers.parsers.ascend.memory import no_memory, read_db_memory
from analyzers.schema import COMM_BANDWIDTH, COMM_OPS, LINKS, OPS, RANKS, STEPS, Profile, conform, empty
from perfbench.errors import ProfileFormatError

DB_RE = re.compile(r"^ascend_(pytorch|mindspore)_profiler(_(\d+))?\.db$")


def profiler_db(rank_dir: Path) -> Path | None:
    out = rank_dir / OUTPUT_DIR
    if not out.is_dir():
        return None
    for name in sorted(os.listdir(out)):  # (os.listdir: pathlib's iterdir costs ~10x more per rank)
        if DB_RE.match(name):
            return out / name
    return None


def is_db_rank(d: Path) -> bool:
    return profiler_db(d) is not None


@contextmanager
def open_db(path: Path):
    tmp = None
    try:
        if Path(str(path) + "-wal").exists():
            tmp = tempfile.mkdtemp(prefix="perfbench-db-")
            shutil.copy2(path, Path(tmp) / path.name)
            shutil.copy2(str(path) + "-wal", Path(tmp) / (path.name + "-wal"))
            con = sqlite3.connect(str(Path(tmp) / path.name))
        else:
            con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            con.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            con.close()
            raise ProfileFormatError(path, f"not a readable SQLite database ({exc})") from None
        try:
            yield con
        except sqlite3.DatabaseError as exc:
            raise ProfileFormatError(path, f"corrupt SQLite database ({exc})") from None
        finally:
            con.close()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _q(con, sql: str) -> pd.DataFrame:
    return pd.read_sql_query(sql, con)


def parse_db_rank(rank_dir: str | Path, *, rank: int | None = None, read_kernels: bool = True) -> Profile:
    """One rank's db export as a Profile. The profiler db gives kernels, steps and collective sizes;
    analysis.db the profiler's breakdown and the communication analyses. Either may be damaged: it then
    becomes a warning naming it and the rank is analyzed with the other (`ranks.inputs` says which)."""
    rank_dir = Path(rank_dir)
    if rank_dir.name == OUTPUT_DIR:
        rank_dir = rank_dir.parent
    dbp = profiler_db(rank_dir)
    if dbp is None:
        raise ProfileFormatError(rank_dir, "no ascend_*_profiler_*.db under ASCEND_PROFILER_OUTPUT")
    info = rank_info(rank_dir)
    adb = rank_dir / OUTPUT_DIR / "analysis.db"
    meta = base_meta("ascend-db", rank_dir, info)
    meta["producer"] = "mindspore" if "mindspore" in dbp.name else "torch_npu"
    meta["files_present"] = ["ascend_*_profiler_*.db"] + (["analysis.db"] if adb.exists() else [])
    io = RankInputs()
    m = DB_RE.match(dbp.name)
    r0 = (
        info["rank"]
        if info["rank"] is not None
        else (int(m.group(3)) if m and m.group(3) else (rank if rank is not None else 0))
    )
    got = io.read(adb, read_analysis_db, r0) if adb.exists() else None
    comm_ops, comm_bw, links, ref = got if got is not None else (None, None, None, None)
    if ref is not None:
        meta["reference_source"] = "analysis.db StepTraceTime"
    ref_step = int(ref["step"].iloc[0]) if ref is not None and len(ref) == 1 else 0
    if not read_kernels and ref is not None:  # the step trace is the breakdown; kernels cross-checked elsewhere
        meta["kernels_skipped"] = SKIPPED
        got = None
    else:
        got = io.read(dbp, _profiler_db, info, r0, ref_step, meta)
    if got is None:
        if not io.used:
            raise ProfileFormatError(dbp, "no readable profiler data (" + "; ".join(io.warnings) + ")")
        r, device, ops, steps, comm = r0, None, empty(OPS), empty(STEPS), None
    else:
        r, device, npu, ops, steps, comm = got
        if npu:
            meta["npu"] = npu
        if r != r0:  # RANK_DEVICE_MAP knows better than the file name
            for df in (comm_ops, comm_bw, links, ref):
                if df is not None and "rank" in df.columns:
                    df["rank"] = r
    comm_ops, comm_bw = _db_comm_ops(comm_ops, comm_bw, comm, ops, r, meta)
    memory = no_memory()
    if not any(w.startswith(str(dbp)) for w in io.warnings):  # a db already found damaged is not read again
        mem = io.read(dbp, _memory, r)
        if mem:
            memory.update(mem)
    ranks = pd.DataFrame(
        [
            {
                "rank": r,
                "host": None,
                "device": device,
                "path": str(rank_dir),
                "stage": pd.NA,
                "dp_group": None,
                "world_size": info.get("world_size"),
                "inputs": io.text,
            }
        ]
    )
    return Profile(
        source="ascend-db",
        path=str(rank_dir),
        ranks=conform(ranks, RANKS),
        steps=conform(steps, STEPS),
        ops=conform(ops, OPS),
        comm_ops=conform(comm_ops, COMM_OPS),
        comm_bandwidth=conform(comm_bw if comm_bw is not None else empty(COMM_BANDWIDTH), COMM_BANDWIDTH),
        links=conform(links if links is not None else empty(LINKS), LINKS),
        **memory,
        reference_breakdown=ref,
        meta=meta,
        warnings=io.warnings,
    )


def _db_comm_ops(comm_ops, comm_bw, comm, ops, r: int, meta: dict):
    """(comm ops, comm bandwidth): analysis.db's CommAnalyzer rows, else the profiler db's COMMUNICATION_OP
    (elapse only); their sizes and algorithms from COMMUNICATION_OP."""
    if comm_ops is None or not len(comm_ops):
        if comm is not None and len(comm):
            comm_ops = pd.DataFrame(
                {
                    "rank": r,
                    "step": ops.loc[ops.category == "communication", "step"].to_numpy(),
                    "op_name": comm["name"],
                    "op_type": comm["name"].map(comm_op_type),
                    "group": comm["grp"].fillna(""),
                    "group_size": pd.NA,
                    "start_us": comm["startNs"].astype(float) / 1e3,
                    "elapse_ms": (comm["endNs"] - comm["startNs"]).astype(float) / 1e6,
                }
            )
            meta["comm_source"] = "COMMUNICATION_OP (elapse only)"
        else:
            comm_ops = empty(COMM_OPS)
            meta["comm_source"] = "none"
        comm_bw = empty(COMM_BANDWIDTH)
    else:
        meta["comm_source"] = "analysis.db CommAnalyzer*"
    if comm is not None and len(comm) and len(comm_ops):
        sizes = {
            n: float(c) * DTYPE_BYTES.get(str(d).upper(), np.nan)
            for n, c, d in zip(comm["name"], comm["count"], comm["data_type"])
            if c is not None
        }
        comm_ops["size_bytes"] = comm_ops["op_name"].map(sizes)
        comm_ops["alg_type"] = comm_ops["op_name"].map(dict(zip(comm["name"], comm["alg_type"])))
    return comm_ops, comm_bw


def _memory(dbp: Path, r: int) -> dict:
    """MEMORY_RECORD / OP_MEMORY / NPU_MODULE_MEM of the profiler db (analyzers.parsers.ascend.memory)."""
    with open_db(dbp) as con:
        return read_db_memory(con, r, _tables(con), dbp)


def _profiler_db(dbp: Path, info: dict, r: int, ref_step: int, meta: dict):
    """(rank, device, npu, ops, steps, communication ops) from ascend_*_profiler_*.db."""
    device = npu = None
    with open_db(dbp) as con:
        t = _tables(con)
        add_db_meta(meta, con)  # parallel_group_info / distributed_args rows of META_DATA
        for need in ("TASK", "STRING_IDS"):
            if need not in t:
                raise ProfileFormatError(dbp, f"missing required table {need}")
        if "RANK_DEVICE_MAP" in t:
            rd = con.execute("SELECT rankId, deviceId FROM RANK_DEVICE_MAP").fetchall()
            if rd and rd[0][0] is not None and int(rd[0][0]) >= 0:
                r = int(rd[0][0])
            device = str(rd[0][1]) if rd else None
        if "NPU_INFO" in t:
            ni = con.execute("SELECT name FROM NPU_INFO").fetchall()
            if ni:
                npu = ni[0][0]
        comp = (
            _q(
                con,
                """
            SELECT s.value AS name, ot.value AS type, tt.value AS core_type, t.startNs, t.endNs, t.streamId AS stream,
                   c.blockDim AS block_dim, c.globalTaskId AS task
            FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId
            LEFT JOIN STRING_IDS s ON s.id = c.name LEFT JOIN STRING_IDS ot ON ot.id = c.opType
            LEFT JOIN STRING_IDS tt ON tt.id = c.taskType""",
            )
            if "COMPUTE_TASK_INFO" in t
            else pd.DataFrame(columns=["name", "type", "core_type", "startNs", "endNs", "stream", "block_dim", "task"])
        )
        comm = (
            _q(
                con,
                """
            SELECT s.value AS name, g.value AS grp, o.startNs, o.endNs, o.count, dt.name AS data_type,
                   al.value AS alg_type, ot.value AS op_kind
            FROM COMMUNICATION_OP o LEFT JOIN STRING_IDS s ON s.id = o.opName
            LEFT JOIN STRING_IDS g ON g.id = o.groupName LEFT JOIN STRING_IDS al ON al.id = o.algType
            LEFT JOIN STRING_IDS ot ON ot.id = o.opType
            LEFT JOIN ENUM_HCCL_DATA_TYPE dt ON dt.id = o.dataType""",
            )
            if {"COMMUNICATION_OP", "ENUM_HCCL_DATA_TYPE"} <= t
            else pd.DataFrame(columns=["name", "grp", "startNs", "endNs", "count", "data_type", "alg_type", "op_kind"])
        )
        host_steps = _q(con, "SELECT id AS step, startNs, endNs FROM STEP_TIME") if "STEP_TIME" in t else None
        pmu = None
        if "TASK_PMU_INFO" in t and len(comp):
            pmu = _q(
                con,
                "SELECT p.globalTaskId AS task, s.value AS metric, p.value FROM TASK_PMU_INFO p "
                "JOIN STRING_IDS s ON s.id = p.name",
            )
    ops, steps = _db_ops_and_steps(comp, comm, pmu, host_steps, r, ref_step)
    return r, device, npu, ops, steps, comm


def _db_ops_and_steps(comp, comm, pmu, host_steps, r: int, ref_step: int):
    """(ops, steps) from the profiler db's compute tasks, communication ops, PMU metrics and STEP_TIME: each op in
    the host step it starts in (or the first), each step's device span and host window."""
    ops = pd.concat(
        [
            pd.DataFrame(
                {
                    "rank": r,
                    "name": comp["name"],
                    "type": na_to_none(comp["type"]),
                    "category": "compute",
                    "start_us": comp["startNs"].astype(float) / 1e3,
                    "dur_us": (comp["endNs"] - comp["startNs"]).astype(float) / 1e3,
                    "stream": comp["stream"].astype(str),
                    "core_type": na_to_none(comp["core_type"]),
                    "block_dim": comp["block_dim"],
                    "task": comp["task"],
                }
            ),
            pd.DataFrame(
                {
                    "rank": r,
                    "name": comm["name"],
                    "type": comm["name"].map(comm_op_type),
                    "category": "communication",
                    "start_us": comm["startNs"].astype(float) / 1e3,
                    "dur_us": (comm["endNs"] - comm["startNs"]).astype(float) / 1e3,
                    "stream": None,
                    "core_type": "HCCL",
                }
            ),
        ],
        ignore_index=True,
    )
    if pmu is not None and len(pmu):
        wide = pmu.pivot_table(index="task", columns="metric", values="value", aggfunc="first")
        ops = ops.merge(wide, left_on="task", right_index=True, how="left")
    # steps: ops belong to the host step they start in (or the first step if they start before it)
    if host_steps is not None and len(host_steps):
        hs = host_steps.sort_values("startNs")
        starts = hs["startNs"].to_numpy(float) / 1e3
        idx = np.searchsorted(starts, ops["start_us"].to_numpy(float), side="right") - 1
        ops["step"] = hs["step"].to_numpy()[np.clip(idx, 0, None)]
        host = {int(s): (a / 1e3, b / 1e3) for s, a, b in zip(hs["step"], hs["startNs"], hs["endNs"])}
    else:  # one profiled step without STEP_TIME: the profiler's step trace names it
        ops["step"] = ref_step
        host = {}
    ops["step"] = ops["step"].astype("Int64")
    steps = device_step_windows(ops["step"], ops["start_us"], ops["start_us"] + ops["dur_us"])
    steps.insert(0, "rank", r)
    if host:
        steps["host_start_us"] = steps["step"].map(lambda s: host.get(int(s), (np.nan, np.nan))[0])
        steps["host_end_us"] = steps["step"].map(lambda s: host.get(int(s), (np.nan, np.nan))[1])
    return ops, steps


REF_COLS = {
    "computing": "computing_us",
    "communication_not_overlapped": "communication_not_overlapped_us",
    "overlapped": "overlapped_us",
    "communication": "communication_us",
    "free": "free_us",
    "stage": "stage_us",
    "bubble": "bubble_us",
    "communication_not_overlapped_and_exclude_receive": "communication_not_overlapped_exclude_receive_us",
    "preparing": "preparing_us",
}


def read_analysis_db(path: Path, r: int):
    """(comm_ops, comm_bandwidth, links, reference_breakdown) from one rank's analysis.db (None where its
    table is missing)."""
    with open_db(path) as con:
        t = _tables(con)
        ref = None
        if "StepTraceTime" in t:
            ref = _q(con, "SELECT * FROM StepTraceTime").rename(columns=REF_COLS)
            ref["step"] = ref["step"].map(lambda s: step_of(s) if step_of(s) is not None else 0).astype("int64")
            ref.insert(0, "rank", r)
        co = cb = None
        links = empty(LINKS)
        if "CommAnalyzerTime" in t:
            ct = _q(con, "SELECT * FROM CommAnalyzerTime")
            co = pd.DataFrame(
                {
                    "rank": r,
                    "step": ct["step"].map(step_of).astype("Int64"),
                    "op_name": ct["hccl_op_name"],
                    "op_type": ct["hccl_op_name"].map(comm_op_type),
                    "group": ct["group_name"].astype(str),
                    "group_size": pd.NA,
                    "start_us": ct["start_timestamp"].astype(float),
                    "elapse_ms": ct["elapse_time"].astype(float),
                    "transit_ms": ct["transit_time"].astype(float),
                    "wait_ms": ct["wait_time"].astype(float),
                    "synchronization_ms": ct["synchronization_time"].astype(float),
                    "idle_ms": ct["idle_time"].astype(float),
                    "kind": ct["type"],
                }
            )
            den = co["wait_ms"] + co["transit_ms"]
            co["wait_ratio"] = (co["wait_ms"] / den).where(den > 0, 0.0).round(4)
            co = co[co["op_name"] != "Total Op Info"]
        if "CommAnalyzerBandwidth" in t:
            b = _q(con, "SELECT * FROM CommAnalyzerBandwidth")
            b = b[b["hccl_op_name"] != "Total Op Info"]
            b = b.drop_duplicates(subset=["step", "hccl_op_name", "group_name", "transport_type"])
            cb = pd.DataFrame(
                {
                    "rank": r,
                    "step": b["step"].map(step_of).astype("Int64"),
                    "op_name": b["hccl_op_name"],
                    "transport": b["transport_type"],
                    "size_mb": b["transit_size"].astype(float),
                    "time_ms": b["transit_time"].astype(float),
                    "bandwidth_gbps": b["bandwidth"].astype(float),
                    "large_packet_ratio": b["large_packet_ratio"].astype(float),
                    "group": b["group_name"].astype(str),
                }
            )
            cb = cb[(cb["size_mb"] > 0) | (cb["time_ms"] > 0)]
        if "CommAnalyzerMatrix" in t:
            m = _q(con, "SELECT * FROM CommAnalyzerMatrix")
            m = m[m["hccl_op_name"] != "Total Op Info"]
            links = pd.DataFrame(
                {
                    **link_keys(m),
                    "size_mb": m["transit_size"].astype(float),
                    "time_ms": m["transit_time"].astype(float),
                    "bandwidth_gbps": m["bandwidth"].astype(float),
                    "hccl_op_name": m.get("op_name"),
                    "rank": r,
                    "kind": m["type"],
                }
            )
    return co, cb if cb is not None else empty(COMM_BANDWIDTH), links, ref
