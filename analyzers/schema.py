"""The one normalized schema every parser produces and every analysis consumes.

Parsers (one per input format) turn raw profiler output into a `Profile`: a handful of pandas
DataFrames with the columns below. Analyses never look at raw files; parsers never compute metrics.
Times are microseconds (`*_us`) on the rank's own clock unless the column says otherwise; byte
counts are bytes; bandwidths are GB/s (1e9 bytes per second).

Optional columns may be absent or NaN; extra columns a parser finds (e.g. AI Core metrics) are kept.
Use `empty(TABLE)` for an empty table with the right columns and `conform(df, TABLE)` to add missing
optional columns and order them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


def bandwidth_gbps(size, time):
    """size / time where time > 0, NaN (unknown) otherwise: never 0.0 and never inf. The one bandwidth helper
    of parsers and analyses. MB / ms and GB / s are both GB/s; scalars, arrays and Series (index kept) alike."""
    size = pd.to_numeric(size, errors="coerce") if isinstance(size, pd.Series) else np.asarray(size, dtype=float)
    time = pd.to_numeric(time, errors="coerce") if isinstance(time, pd.Series) else np.asarray(time, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(
            np.asarray(time, dtype=float) > 0, np.asarray(size, dtype=float) / np.asarray(time, dtype=float), np.nan
        )
    if isinstance(size, pd.Series) or isinstance(time, pd.Series):
        index = size.index if isinstance(size, pd.Series) else time.index
        return pd.Series(out, index=index, dtype="float64")
    return float(out) if out.ndim == 0 else out


#: `comm_ops.op_type` of a collective, by the words in its op name (any producer's convention)
_COMM_TYPES = [  # order matters: longer names first
    ("reducescatter", "reducescatter"),
    ("allgather", "allgather"),
    ("allreduce", "allreduce"),
    ("alltoallv", "alltoallv"),
    ("alltoall", "alltoall"),
    ("broadcast", "broadcast"),
    ("batchsendrecv", "send"),
    ("receive", "recv"),
    ("recv", "recv"),
    ("send", "send"),
    ("reduce", "reduce"),
    ("barrier", "barrier"),
    ("gather", "gather"),
    ("scatter", "scatter"),
]


def comm_op_type(name: str) -> str:
    """allreduce | allgather | ... from an HCCL op name like hcom_allReduce__586_0_1 or AllReduce-op2."""
    key = re.sub(r"[^a-z]", "", str(name).lower())
    for needle, typ in _COMM_TYPES:
        if needle in key:
            return typ
    return "other"


# ---- raw-event tables (what parsers produce) ---------------------------------------------

#: one row per rank found in the input
RANKS = {
    "rank": "int64",  # global rank id
    "host": "object",  # host name if known
    "device": "object",  # device id / "cpu"
    "path": "object",  # the rank's directory
    "stage": "Int64",  # pipeline stage, if known
    "dp_group": "object",  # data-parallel group label, if known
    "world_size": "Int64",
    "inputs": "object",  # comma-separated names of the files this rank was read from
}

#: step windows per rank; analyses clip events to them
STEPS = {
    "rank": "int64",
    "step": "int64",
    "start_us": "float64",
    "end_us": "float64",
}

#: device (or CPU) operators / kernels, one row per execution
OPS = {
    "rank": "int64",
    "step": "Int64",  # step the op falls in (filled by the parser, else by analyzers.schema.step_of)
    "name": "object",  # op / kernel name (full scope name if known)
    "type": "object",  # op type, e.g. MatMul, Conv2D, AllReduce
    # "compute" | "communication" | "communication_task" (HCCL sub-task of a collective) | "other"
    "category": "object",
    "start_us": "float64",
    "dur_us": "float64",
    "stream": "object",  # stream / thread / core the op ran on
    "core_type": "object",  # AI_CORE, AI_VECTOR_CORE, AI_CPU, MIX_AIC, CPU ...
}

#: one row per collective (or p2p) operation per rank: time decomposition and size
COMM_OPS = {
    "rank": "int64",
    "step": "Int64",
    "op_name": "object",  # e.g. hcom_allReduce__123_1_1, Default/.../AllReduce-op2
    "op_type": "object",  # allreduce | allgather | reducescatter | broadcast | alltoall | send | recv | ...
    "group": "object",  # communication group name / hash, "" if unknown
    "group_size": "Int64",  # ranks in the group, if known
    "start_us": "float64",
    "elapse_ms": "float64",  # total time of the op on this rank
    "transit_ms": "float64",  # time moving data
    "wait_ms": "float64",  # time waiting for peers before data moved
    "synchronization_ms": "float64",
    "idle_ms": "float64",
    "size_bytes": "float64",  # payload of the collective (input buffer), if known
}

#: bandwidth per transport for each comm op (long format: one row per op x transport)
COMM_BANDWIDTH = {
    "rank": "int64",
    "step": "Int64",
    "op_name": "object",
    "transport": "object",  # HCCS | RDMA | SDMA | PCIE | SIO | LOCAL | MCCL ...
    "size_mb": "float64",
    "time_ms": "float64",
    "bandwidth_gbps": "float64",
}

#: point-to-point links (communication matrix): one row per op x src-dst pair
LINKS = {
    "step": "Int64",
    "op_name": "object",
    "group": "object",
    "src": "int64",
    "dst": "int64",
    "transport": "object",
    "size_mb": "float64",
    "time_ms": "float64",
    "bandwidth_gbps": "float64",
}

#: memory over time, one row per record the profiler wrote (per rank and component). `component` is what the
#: numbers describe: "APP" = the whole process on the device (Ascend memory_record APP rows: only Total
#: Reserved is given); the framework's allocator: "PTA", "GE", "PTA+GE" (torch_npu), "MINDSPORE" /
#: "MindSpore" (MindSpore on Ascend), "cpu" (MindSpore's CPU profiler, cpu_ms_memory_record_{rank}.txt)
MEMORY = {
    "rank": "int64",
    "component": "object",
    "ts_us": "float64",
    "allocated_bytes": "float64",  # allocator's Total Allocated (NaN where the row has none, e.g. APP)
    "reserved_bytes": "float64",  # Total Reserved
    "active_bytes": "float64",  # Total Active
    "device": "object",  # e.g. NPU:0, cpu
}

#: one row per allocation the profiler recorded (Ascend operator_memory.csv / OP_MEMORY)
OP_MEMORY = {
    "rank": "int64",
    "name": "object",  # op that allocated, e.g. aten::empty_strided
    "size_bytes": "float64",
    "alloc_us": "float64",
    "release_us": "float64",  # NaN: not released inside the profiled window
    "device": "object",
}

#: reserved memory per device module over time (Ascend npu_module_mem.csv / NPU_MODULE_MEM): HCCL, RUNTIME, ...
MODULE_MEMORY = {
    "rank": "int64",
    "module": "object",
    "ts_us": "float64",
    "reserved_bytes": "float64",
    "device": "object",
}

# ---- analysis tables (what analyses produce; also what the store keeps) ----------------------

#: per rank and step, the msprof-analyze "step trace" breakdown
STEP_BREAKDOWN = {
    "rank": "int64",
    "step": "int64",
    "step_us": "float64",  # wall time of the step window
    "computing_us": "float64",  # union of compute ops
    "communication_us": "float64",  # union of communication ops
    "communication_not_overlapped_us": "float64",  # communication minus computing
    "overlapped_us": "float64",  # communication that overlaps computing
    "free_us": "float64",  # step - (computing ∪ communication)
    "preparing_us": "float64",  # step start to first device op (Ascend), else 0
    "bubble_us": "float64",  # pipeline bubble (receive waits), if known
    "stage_us": "float64",  # stage time (pipeline), if known
}

#: the parts of a step's time in the breakdown, in the order views list them: column `<part>_us` of
#: STEP_BREAKDOWN, run-level metric `<part>_s` in analyzers.catalogue
BREAKDOWN_PARTS = (
    "computing",
    "communication",
    "communication_not_overlapped",
    "overlapped",
    "free",
    "preparing",
    "bubble",
)
#: the parts that tile the step (computing + exposed communication + free, with the overlap beside them): what
#: per-rank bars and share columns show
STEP_SHARE_PARTS = ("computing", "communication_not_overlapped", "overlapped", "free")


def warmup_steps(config: dict | None) -> int:
    """The run config's `train.warmup_steps` (0 when absent or not a number): steps below it are warm-up,
    left out of every metric. The one reader of it for analyses, compare, predict and the dashboard."""
    train = (config or {}).get("train") if isinstance(config, dict) else None
    try:
        return int((train if isinstance(train, dict) else {}).get("warmup_steps") or 0)
    except (TypeError, ValueError):
        return 0


#: the workload's own per-step record (from workloads' metrics files)
WORKLOAD_STEPS = {
    "rank": "int64",
    "step": "int64",
    "start_ts": "float64",  # wall clock, seconds since epoch
    "end_ts": "float64",
    "step_time_s": "float64",
    "samples": "int64",  # samples (or tokens for LMs) processed by this rank in this step
    "loss": "float64",
    "profiled": "bool",
}

TABLES = {
    "ranks": RANKS,
    "steps": STEPS,
    "ops": OPS,
    "comm_ops": COMM_OPS,
    "comm_bandwidth": COMM_BANDWIDTH,
    "links": LINKS,
    "memory_records": MEMORY,
    "op_memory": OP_MEMORY,
    "module_memory": MODULE_MEMORY,
    "step_breakdown": STEP_BREAKDOWN,
    "workload_steps": WORKLOAD_STEPS,
}

COMM_OP_TYPES = (
    "allreduce",
    "allgather",
    "reducescatter",
    "broadcast",
    "alltoall",
    "alltoallv",
    "reduce",
    "send",
    "recv",
    "barrier",
    "gather",
    "scatter",
)


_EMPTY: dict[tuple, pd.DataFrame] = {}


def empty(table: dict) -> pd.DataFrame:
    """An empty table with the schema's columns and dtypes (a copy of a cached template: building one
    from Series costs ~5 ms, and parsers of many-rank clusters ask for hundreds)."""
    key = tuple(table.items())
    tpl = _EMPTY.get(key)
    if tpl is None:
        tpl = _EMPTY[key] = pd.DataFrame({c: pd.Series(dtype=t) for c, t in table.items()})
    return tpl.copy()


def conform(df: pd.DataFrame, table: dict) -> pd.DataFrame:
    """Add missing schema columns (as NA), cast known ones, keep extras after the schema columns."""
    df = df.reset_index(drop=True)
    for col, dtype in table.items():
        if col not in df.columns:
            if dtype == "float64":
                df[col] = float("nan")
            else:
                df[col] = pd.array([pd.NA] * len(df), dtype="Int64" if dtype == "int64" else dtype)
        else:
            try:
                df[col] = df[col].astype(dtype)
            except (TypeError, ValueError):
                pass
    extras = [c for c in df.columns if c not in table]
    return df[list(table) + extras]


class Columns:
    """A table being built as {column: list of values}, for parsers of many small per-rank files.

    Building a DataFrame costs ~0.1-1 ms of pandas overhead whatever its size, so a cluster parsed into
    one DataFrame per rank and file spends most of its time there (and pickling frames back from worker
    processes). A rank's small tables are kept as columns instead, concatenated across ranks with
    `Columns.concat` and turned into one DataFrame per table with `frame()`: the same values and the same
    pandas type inference as `pd.concat` of per-rank `pd.DataFrame(rows)` (a column a part lacks is NaN)."""

    __slots__ = ("data", "n")

    def __init__(self, data: dict | None = None, n: int = 0):
        self.data: dict[str, list] = data if data is not None else {}
        self.n = n

    def append(self, row: dict) -> None:
        data = self.data
        if row.keys() != data.keys():
            for k in row:
                if k not in data:
                    data[k] = [float("nan")] * self.n
            for k, col in data.items():
                if k not in row:
                    col.append(float("nan"))
        for k, v in row.items():
            data[k].append(v)
        self.n += 1

    def __len__(self) -> int:
        return self.n

    @staticmethod
    def from_rows(keys: tuple[str, ...], rows: list[tuple]) -> "Columns":
        """Rows that all have the same columns `keys` (tuples in that order): cheaper than `append` per row."""
        return Columns({k: list(col) for k, col in zip(keys, zip(*rows))} if rows else {}, len(rows))

    def frame(self, dtypes: dict | None = None) -> pd.DataFrame:
        df = pd.DataFrame(self.data) if self.n else pd.DataFrame({c: [] for c in self.data})
        for c, t in (dtypes or {}).items():
            if c in df.columns:
                df[c] = df[c].astype(t)
        return df

    @staticmethod
    def concat(parts: list) -> "Columns":
        """One Columns holding the rows of `parts` in order (columns in first-seen order)."""
        cols: dict[str, None] = {}
        for p in parts:
            cols.update(dict.fromkeys(p.data))
        n = sum(p.n for p in parts)
        if any(isinstance(v, np.ndarray) for p in parts for v in p.data.values()):  # columnar readers' arrays
            return Columns({c: _concat_arrays([p.data.get(c) for p in parts], [p.n for p in parts]) for c in cols}, n)
        out: dict[str, list] = {c: [] for c in cols}
        for p in parts:
            for c, col in out.items():
                v = p.data.get(c)
                col.extend(v if v is not None else [float("nan")] * p.n)
        return Columns(out, n)


def _concat_arrays(cols: list, sizes: list[int]) -> np.ndarray:
    """One array of the parts' columns (a list made an array, a missing column NaN), as `Columns.concat`'s
    lists would hold them."""
    arrays = []
    for v, k in zip(cols, sizes):
        if v is None:
            arrays.append(np.full(k, np.nan))
        elif isinstance(v, np.ndarray):
            arrays.append(v)
        else:
            a = np.empty(k, dtype=object)
            a[:] = v
            arrays.append(a)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def frames(parts: list, dtypes: dict | None = None) -> list[pd.DataFrame]:
    """DataFrames for a sequence of non-empty tables that are DataFrames or Columns, in order: each run of
    consecutive Columns becomes one DataFrame."""
    out: list[pd.DataFrame] = []
    run: list[Columns] = []
    for p in list(parts) + [None]:
        if isinstance(p, Columns):
            run.append(p)
            continue
        if run:
            out.append(Columns.concat(run).frame(dtypes))
            run = []
        if p is not None:
            out.append(p)
    return out


@dataclass
class Profile:
    """Everything a parser read from one profiler output (one rank or a whole cluster)."""

    source: str  # format name, e.g. "mindspore-cpu", "ascend-text", "ascend-db", "msprof", "mindspore-legacy"
    path: str
    ranks: pd.DataFrame = field(default_factory=lambda: empty(RANKS))
    steps: pd.DataFrame = field(default_factory=lambda: empty(STEPS))
    ops: pd.DataFrame = field(default_factory=lambda: empty(OPS))
    comm_ops: pd.DataFrame = field(default_factory=lambda: empty(COMM_OPS))
    comm_bandwidth: pd.DataFrame = field(default_factory=lambda: empty(COMM_BANDWIDTH))
    links: pd.DataFrame = field(default_factory=lambda: empty(LINKS))
    #: memory timeline, allocations and device-module memory (empty where the profiler recorded none)
    memory_records: pd.DataFrame = field(default_factory=lambda: empty(MEMORY))
    op_memory: pd.DataFrame = field(default_factory=lambda: empty(OP_MEMORY))
    module_memory: pd.DataFrame = field(default_factory=lambda: empty(MODULE_MEMORY))
    #: breakdown the profiler itself wrote (step_trace_time.csv, analysis.db StepTraceTime, ...)
    reference_breakdown: pd.DataFrame | None = None
    #: free-form facts: versions, device type, parallel groups, profiler config
    meta: dict = field(default_factory=dict)
    #: problems met while reading (a missing or damaged file on some rank), each naming the file; the
    #: rank is still analyzed with what it has (`perfbench analyze --strict` turns them into an error)
    warnings: list[str] = field(default_factory=list)


#: the tables `conformed_profile` takes, each with its schema
PROFILE_TABLES = {"ranks": RANKS, "steps": STEPS, "ops": OPS, "comm_ops": COMM_OPS, "memory_records": MEMORY}


def conformed_profile(source: str, path: str, meta: dict, warnings: list[str], **tables: pd.DataFrame) -> Profile:
    """A parser's Profile from its tables (any of PROFILE_TABLES' names), each conformed to its schema."""
    return Profile(
        source=source,
        path=path,
        meta=meta,
        warnings=warnings,
        **{name: conform(df, PROFILE_TABLES[name]) for name, df in tables.items()},
    )


#: the advice table's columns (analyzers/analyses/advice/; docs/advice.md): the engine gives every finding them
ADVICE_COLUMNS = [
    "id",
    "rule",
    "severity",
    "message",
    "evidence",
    "ranks",
    "stage",
    "gain_ms",
    "gain_share",
    "basis",
    "symptom_of",
    "try",
    "predicted_step_ms",
    "explains",
]


def step_of(rows: pd.DataFrame, steps: pd.DataFrame | None, col: str = "start_us") -> pd.Series:
    """The step whose window [start_us, end_us) on the same rank holds each row's `col` (Int64); NA outside every
    window, for a rank without steps, or where `col` is unknown. The one rule every parser and the breakdown use to
    put an op, a collective or a memory record into a step."""
    out = pd.Series(pd.NA, index=rows.index, dtype="Int64")
    if rows is None or not len(rows) or steps is None or not len(steps):
        return out
    for rank, st in steps.groupby("rank"):
        sel = (rows["rank"] == rank).to_numpy()
        if not sel.any():
            continue
        st = st.sort_values("start_us")
        starts = st["start_us"].to_numpy(float)
        ends = st["end_us"].to_numpy(float)
        ids = st["step"].to_numpy()
        t = rows.loc[sel, col].to_numpy(float)
        idx = np.searchsorted(starts, t, side="right") - 1
        j = np.clip(idx, 0, len(starts) - 1)
        inside = (idx >= 0) & (t < ends[j])
        vals = pd.array(np.where(inside, ids[j], 0).astype("int64"), dtype="Int64")
        vals[~inside] = pd.NA
        out.loc[sel] = vals
    return out
