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

import numpy as np
import pandas as pd

from analyzers.parsers.ascend.common import RankInputs, read_columnar_csv, read_csv
from analyzers.schema import MEMORY, MODULE_MEMORY, OP_MEMORY, Columns, conform, empty
from perfbench.errors import ProfileFormatError

MIB, KIB = 1048576.0, 1024.0
MEMORY_FILES = ("memory_record.csv", "operator_memory.csv", "npu_module_mem.csv")


#: each file: (required headers, optional headers, numeric columns (our names)) as `read_csv` takes them
_RECORD = (
    {"Component": "component", "Timestamp(us)": "ts_us"},
    {
        "Total Allocated(MB)": "allocated_mb",
        "Total Reserved(MB)": "reserved_mb",
        "Total Active(MB)": "active_mb",
        "Device Type": "device",
    },
    ("ts_us", "allocated_mb", "reserved_mb", "active_mb"),
)
#: memory_record.csv for a rank's peaks only (summary mode): the device column is not read
_RECORD_PEAKS = (_RECORD[0], {k: v for k, v in _RECORD[1].items() if v != "device"}, _RECORD[2])
_OPERATOR = (
    {"Name": "name", "Size(KB)": "size_kb", "Allocation Time(us)": "alloc_us"},
    {"Release Time(us)": "release_us", "Device Type": "device"},
    ("size_kb", "alloc_us", "release_us"),
)
_MODULE = (
    {"Component": "module", "Timestamp(us)": "ts_us", "Total Reserved(MB)": "reserved_mb"},
    {"Device": "device"},
    ("ts_us", "reserved_mb"),
)


def _columns(path: Path, spec: tuple, arrow_text: bool = False) -> tuple[dict, int]:
    """The file's wanted columns as NumPy arrays (text as Arrow arrays with `arrow_text`) and their row count: read
    by Arrow when the file is regular (`read_columnar_csv`), else by `read_csv` (which also reports a damaged
    file)."""
    cols = read_columnar_csv(path, *spec, arrow_text=arrow_text)
    if cols is None:
        df = read_csv(path, spec[0], spec[1], numeric=spec[2])
        cols = {c: df[c].to_numpy(dtype="float64" if c in spec[2] else object) for c in df.columns}
    return cols, len(next(iter(cols.values()), []))


def _table(data: dict, n: int, schema: dict, columns: bool):
    """`Columns` (for load_profile to merge across ranks) or a conformed DataFrame."""
    if columns:
        return Columns(data, n)
    return conform(pd.DataFrame(data) if n else empty(schema), schema)


def _scaled(cols: dict, key: str, n: int, factor: float) -> np.ndarray:
    """Column `key` times `factor` (NaN where the file has no such column)."""
    return cols[key] * factor if key in cols else np.full(n, np.nan)


def _text(cols: dict, key: str, n: int, strip: bool = False) -> np.ndarray:
    """Text column `key` (stripped: as `str(v).strip()`), None where the file has no such column."""
    if key not in cols:
        return np.full(n, None, dtype=object)
    if not strip:
        return cols[key]
    if not isinstance(cols[key], np.ndarray):  # an Arrow array (summary mode): stripped by Arrow
        import pyarrow as pa
        import pyarrow.compute as pc

        col = cols[key]
        if isinstance(col, pa.DictionaryArray):  # strip the few distinct values, not every row
            return pa.DictionaryArray.from_arrays(col.indices, pc.utf8_trim_whitespace(col.dictionary))
        return pc.utf8_trim_whitespace(col)
    out = np.empty(n, dtype=object)
    out[:] = [str(v).strip() for v in cols[key]]
    return out


def _rank(r: int, n: int) -> np.ndarray:
    return np.full(n, r, dtype="int64")


def _record(path: Path, r: int, columns: bool = False, arrow_text: bool = False, peaks_only: bool = False):
    c, n = _columns(path, arrow_text=arrow_text, spec=_RECORD_PEAKS if peaks_only else _RECORD)
    data = {"rank": _rank(r, n), "component": _text(c, "component", n, strip=True), "ts_us": c["ts_us"]}
    for k in ("allocated", "reserved", "active"):
        data[f"{k}_bytes"] = _scaled(c, f"{k}_mb", n, MIB)
    data["device"] = _text(c, "device", n)
    return _table(data, n, MEMORY, columns)


def _operator(path: Path, r: int, columns: bool = False, arrow_text: bool = False):
    c, n = _columns(path, arrow_text=arrow_text, spec=_OPERATOR)
    data = {
        "rank": _rank(r, n),
        "name": c["name"],
        "size_bytes": _scaled(c, "size_kb", n, KIB),
        "alloc_us": c["alloc_us"],
        "release_us": _scaled(c, "release_us", n, 1.0),
        "device": _text(c, "device", n),
    }
    return _table(data, n, OP_MEMORY, columns)


def _module(path: Path, r: int, columns: bool = False, arrow_text: bool = False):
    c, n = _columns(path, arrow_text=arrow_text, spec=_MODULE)
    data = {
        "rank": _rank(r, n),
        "module": _text(c, "module", n, strip=True),
        "ts_us": c["ts_us"],
        "reserved_bytes": _scaled(c, "reserved_mb", n, MIB),
        "device": _text(c, "device", n),
    }
    return _table(data, n, MODULE_MEMORY, columns)


def read_text_memory(
    out_dir: Path, r: int, io: RankInputs, columns: bool = False, arrow_text: bool = False, peaks_only: bool = False
) -> dict:
    """{memory_records, op_memory, module_memory} of one rank's text export (empty tables where absent; all
    empty when any memory file present is damaged: the rank's memory is then unknown). `columns`: regular files
    as `Columns`, which load_profile turns into one DataFrame per table across ranks; `arrow_text` (with
    `columns`): their text columns as Arrow arrays, for `rank_summary`. `peaks_only` (a summary-mode import):
    memory_record.csv alone, without its device column (the bytes the rank's peaks need; operator_memory.csv and
    npu_module_mem.csv are read on demand with the rest of the rank's detail)."""
    readers = {
        "memory_records": ("memory_record.csv", _record),
        "op_memory": ("operator_memory.csv", _operator),
        "module_memory": ("npu_module_mem.csv", _module),
    }
    if peaks_only:
        readers = {"memory_records": readers["memory_records"]}
    got: dict = {}
    damaged = False
    for key, (fname, fn) in readers.items():
        p = out_dir / fname
        if not p.exists():
            continue
        before = len(io.warnings)
        kw = {"peaks_only": True} if peaks_only else {}
        df = io.read(p, fn, r, columns=columns, arrow_text=arrow_text, **kw)
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
