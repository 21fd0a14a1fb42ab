"""Ascend memory data -> the schema's memory tables (analyzers.schema MEMORY, OP_MEMORY, MODULE_MEMORY).

Text export (ASCEND_PROFILER_OUTPUT/): `memory_record.csv` (Component, Timestamp(us), Total Allocated(MB),
Total Reserved(MB), Total Active(MB), Device Type), `operator_memory.csv` (Name, Size(KB), Allocation Time(us),
Release Time(us), Device Type), `npu_module_mem.csv` (Component, Timestamp(us), Total Reserved(MB), Device).
The profiler's MB and KB are binary (MiB, KiB: torch_npu divides bytes by 1024**2 / 1024), so bytes =
MB x 1048576 and KB x 1024 exactly.
DB export (ascend_*_profiler_*.db): `MEMORY_RECORD`, `OP_MEMORY` (names and components through STRING_IDS),
`NPU_MODULE_MEM` (modules through ENUM_MODULE); bytes and nanoseconds.

A damaged memory file is a warning naming it and the problem; the rank's memory is then unknown (all its
memory tables empty), the rest of the rank is analyzed as before.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analyzers.parsers.ascend.common import RankInputs, read_csv
from analyzers.schema import MEMORY, MODULE_MEMORY, OP_MEMORY, conform, empty
from perfbench.errors import ProfileFormatError

MIB, KIB = 1048576.0, 1024.0
MEMORY_FILES = ("memory_record.csv", "operator_memory.csv", "npu_module_mem.csv")


def _record(path: Path, r: int) -> pd.DataFrame:
    df = read_csv(
        path,
        {"Component": "component", "Timestamp(us)": "ts_us"},
        {
            "Total Allocated(MB)": "allocated_mb",
            "Total Reserved(MB)": "reserved_mb",
            "Total Active(MB)": "active_mb",
            "Device Type": "device",
        },
        numeric=("ts_us", "allocated_mb", "reserved_mb", "active_mb"),
    )
    out = pd.DataFrame({"rank": r, "component": df["component"].astype(str).str.strip(), "ts_us": df["ts_us"]})
    for c in ("allocated", "reserved", "active"):
        out[f"{c}_bytes"] = df[f"{c}_mb"] * MIB if f"{c}_mb" in df else float("nan")
    out["device"] = df["device"] if "device" in df else None
    return conform(out, MEMORY)


def _operator(path: Path, r: int) -> pd.DataFrame:
    df = read_csv(
        path,
        {"Name": "name", "Size(KB)": "size_kb", "Allocation Time(us)": "alloc_us"},
        {"Release Time(us)": "release_us", "Device Type": "device"},
        numeric=("size_kb", "alloc_us", "release_us"),
    )
    out = pd.DataFrame(
        {
            "rank": r,
            "name": df["name"],
            "size_bytes": df["size_kb"] * KIB,
            "alloc_us": df["alloc_us"],
            "release_us": df["release_us"] if "release_us" in df else float("nan"),
            "device": df["device"] if "device" in df else None,
        }
    )
    return conform(out, OP_MEMORY)


def _module(path: Path, r: int) -> pd.DataFrame:
    df = read_csv(
        path,
        {"Component": "module", "Timestamp(us)": "ts_us", "Total Reserved(MB)": "reserved_mb"},
        {"Device": "device"},
        numeric=("ts_us", "reserved_mb"),
    )
    out = pd.DataFrame(
        {
            "rank": r,
            "module": df["module"].astype(str).str.strip(),
            "ts_us": df["ts_us"],
            "reserved_bytes": df["reserved_mb"] * MIB,
            "device": df["device"] if "device" in df else None,
        }
    )
    return conform(out, MODULE_MEMORY)


def read_text_memory(out_dir: Path, r: int, io: RankInputs) -> dict:
    """{memory_records, op_memory, module_memory} of one rank's text export (empty tables where absent; all
    empty when any memory file present is damaged: the rank's memory is then unknown)."""
    readers = {
        "memory_records": ("memory_record.csv", _record),
        "op_memory": ("operator_memory.csv", _operator),
        "module_memory": ("npu_module_mem.csv", _module),
    }
    got: dict = {}
    damaged = False
    for key, (fname, fn) in readers.items():
        p = out_dir / fname
        if not p.exists():
            continue
        before = len(io.warnings)
        df = io.read(p, fn, r)
        if df is None:
            if len(io.warnings) > before:
                damaged = True
                io.warnings[-1] = io.warnings[-1].replace(
                    "the rank is analyzed without it", "the rank's memory is unknown, the rest is analyzed"
                )
        else:
            got[key] = df
    return {} if damaged else got


#: (schema key, db table, SELECT over it aliased `t` with `{name}` for a STRING_IDS-named column, schema)
DB_QUERIES = (
    (
        "memory_records",
        "MEMORY_RECORD",
        "SELECT {name} AS component, t.timestamp / 1000.0 AS ts_us, "
        "t.totalAllocated AS allocated_bytes, t.totalReserved AS reserved_bytes, t.totalActive AS active_bytes, "
        "t.deviceId AS device FROM MEMORY_RECORD t",
        "component",
        MEMORY,
    ),
    (
        "op_memory",
        "OP_MEMORY",
        "SELECT {name} AS name, t.size AS size_bytes, t.allocationTime / 1000.0 AS alloc_us, "
        "t.releaseTime / 1000.0 AS release_us, t.deviceId AS device FROM OP_MEMORY t",
        "name",
        OP_MEMORY,
    ),
    (
        "module_memory",
        "NPU_MODULE_MEM",
        "SELECT {name} AS module, t.timestampNs / 1000.0 AS ts_us, "
        "t.totalReserved AS reserved_bytes, t.deviceId AS device FROM NPU_MODULE_MEM t",
        "moduleId",
        MODULE_MEMORY,
    ),
)


def read_db_memory(con, r: int, tables: set[str], path: Path) -> dict:
    """The same tables from an open profiler db (`tables`: the names it has): component and op names through
    STRING_IDS, module names through ENUM_MODULE. A damaged memory table raises ProfileFormatError naming the db."""
    import sqlite3

    got: dict = {}
    try:
        for key, table, sql, id_col, schema in DB_QUERIES:
            if table not in tables:
                continue
            names = "ENUM_MODULE" if table == "NPU_MODULE_MEM" else "STRING_IDS"
            if names in tables:
                sql = (
                    sql.format(name="s.value" if names == "STRING_IDS" else "s.name")
                    + f" LEFT JOIN {names} s ON s.id = t.{id_col}"
                )
            else:
                sql = sql.format(name=f"CAST(t.{id_col} AS TEXT)")
            df = pd.read_sql_query(sql, con)
            df.insert(0, "rank", r)
            df["device"] = "NPU:" + df["device"].astype("Int64").astype(str)
            for c in df.columns:  # float64 like the text export (bytes exact; µs at 0.25 µs, as elsewhere)
                if c.endswith(("_bytes", "_us")):
                    df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
            got[key] = conform(df, schema)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
        raise ProfileFormatError(path, f"memory tables not readable ({exc})") from None
    return got


def no_memory() -> dict:
    return {"memory_records": empty(MEMORY), "op_memory": empty(OP_MEMORY), "module_memory": empty(MODULE_MEMORY)}
