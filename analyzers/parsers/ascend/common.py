"""Helpers shared by the Ascend text and .db parsers: header-by-name CSV reading, rank identity,
op classification. Never imports MindSpore."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.groups import groups_from_metadata
from analyzers.schema import Columns
from analyzers.schema import comm_op_type as comm_op_type  # its home is the schema; re-exported for the parsers
from perfbench.errors import ProfileFormatError

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"

#: bytes per element of the dtypes HCCL and the op tables name (collective sizes from counts)
DTYPE_BYTES = {
    "INT8": 1,
    "UINT8": 1,
    "INT16": 2,
    "UINT16": 2,
    "FP16": 2,
    "BFP16": 2,
    "BF16": 2,
    "INT32": 4,
    "UINT32": 4,
    "FP32": 4,
    "INT64": 8,
    "UINT64": 8,
    "FP64": 8,
    "INT128": 16,
}
#: meta["kernels_skipped"] of a rank whose kernels were not read
SKIPPED = "not read: the profiler's step trace is the breakdown (kernels cross-checked on other ranks)"


def norm(col: str) -> str:
    """Header key used for matching: case, spaces, underscores and BOM ignored ("Step ID" == "Step Id")."""
    return re.sub(r"[\s_\ufeff]+", "", str(col)).lower()


def read_csv(
    path: Path, required: dict[str, str], optional: dict[str, str] | None = None, numeric: tuple[str, ...] = ()
) -> pd.DataFrame:
    """Read a profiler CSV by header name.

    `required` / `optional` map a header as the profiler writes it (matched with `norm`) to our column
    name. Unknown extra columns are kept under their original header. `numeric` lists *our* names to
    convert to float (trailing tabs/spaces stripped, "N/A" -> NaN). A missing required column or a
    non-numeric value in a required numeric column raises ProfileFormatError naming file and column.
    """
    optional = optional or {}
    try:
        df = pd.read_csv(
            path,
            keep_default_na=False,
            na_values=["", "N/A", "NA", "nan", "None"],
            encoding="utf-8-sig",
            on_bad_lines="error",
            low_memory=False,
        )
    except pd.errors.EmptyDataError:
        raise ProfileFormatError(path, "file is empty (no header line)") from None
    except pd.errors.ParserError as exc:
        raise ProfileFormatError(path, f"corrupt CSV ({str(exc).splitlines()[0][:200]})") from None
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(path, f"not a text CSV file ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    _check_complete(path, df)
    by_norm = {norm(c): c for c in df.columns}
    rename = {}
    for src, dst in {**required, **optional}.items():
        orig = by_norm.get(norm(src))
        if orig is not None:
            rename[orig] = dst
        elif src in required:
            found = ", ".join(str(c) for c in list(df.columns)[:12])
            raise ProfileFormatError(path, f"missing required column '{src}' (header has: {found})")
    df = df.rename(columns=rename)
    for col in numeric:
        if col not in df.columns:
            continue
        if pd.api.types.is_numeric_dtype(df[col]) and not pd.api.types.is_bool_dtype(df[col]):
            conv = df[col].astype("float64")
        else:
            s = df[col].astype(str).str.strip().str.strip('"').str.strip()
            s = s.where(~s.isin(["", "N/A", "NA", "nan", "None", "-", "<NA>"]), None)
            conv = pd.to_numeric(s, errors="coerce").astype("float64")
        if col in required.values():
            bad = conv.isna()
            if bad.any():
                i = int(np.flatnonzero(bad.to_numpy())[0])
                raw = df[col].iloc[i]
                src = next(k for k, v in required.items() if v == col)
                what = (
                    "is empty (file truncated?)"
                    if raw is None
                    or (isinstance(raw, float) and np.isnan(raw))
                    or str(raw).strip() in ("", "nan", "<NA>")
                    else f"is not a number: {str(raw)[:40]!r}"
                )
                raise ProfileFormatError(path, f"line {i + 2}: column '{src}' {what}")
        df[col] = conv
    return df


_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_INTEGER = re.compile(r"\d+")
#: a column's cells joined by newlines, each a `_NUMBER` / an `_INTEGER` (one match per column, not per cell)
_NUMBERS = re.compile(f"(?:{_NUMBER.pattern}\n)*{_NUMBER.pattern}")
_INTEGERS = re.compile(f"(?:{_INTEGER.pattern}\n)*{_INTEGER.pattern}")


def _csv_rows(path: Path, required: dict[str, str], optional: dict[str, str]):
    """A CSV's non-empty rows (header first) and our name for each header (None: not wanted), without pandas;
    None when it cannot be read or has no data row."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = [r for r in csv.reader(fh) if r]
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if len(rows) < 2:
        return None
    by_norm = {norm(k): v for k, v in {**required, **optional}.items()}
    return rows, [by_norm.get(norm(h)) for h in rows[0]]


def read_small_csv(
    path: Path,
    required: dict[str, str],
    optional: dict[str, str],
    numeric: tuple[str, ...],
    integer: tuple[str, ...] = (),
):
    """A small, regular profiler CSV (a step trace: a few rows) as a `Columns`, without pandas; None when
    the file is anything but plain (an unknown, repeated or missing header, a row of another width, an
    empty, N/A or malformed cell, no data row): then `read_csv` reads it and reports its problems.

    Headers as in `read_csv`. `numeric` (our names) are read as float (Python's float(): correctly rounded,
    the exact number the profiler wrote; pandas' own parser is off by one ulp for ~7% of such numbers),
    `integer` as int; a file with any other column is left to `read_csv`. Same columns, order and values
    as `read_csv` gives for such a file."""
    got_rows = _csv_rows(path, required, optional)
    if got_rows is None:
        return None
    rows, names = got_rows
    if (
        None in names
        or len(set(names)) != len(names)
        or not set(required.values()) <= set(names)
        or not set(names) <= set(numeric) | set(integer)
    ):
        return None

    width = len(names)
    if any(len(row) != width for row in rows):
        return None
    cols: dict[str, list] = {}
    for n, cells in zip(names, zip(*rows[1:])):  # column by column: one check and one conversion per column
        pattern, kind = (_NUMBERS, float) if n in numeric else (_INTEGERS, int)
        if not pattern.fullmatch("\n".join(cells)):  # every cell (a cell holding a newline fails the conversion)
            return None
        try:
            cols[n] = list(map(kind, cells))
        except ValueError:
            return None
    return Columns(cols, len(rows) - 1)


_NA_CELLS = frozenset(("", "N/A", "NA", "nan", "None"))
_NOT_NUMERIC = re.compile(r"[^0-9eE+\-.]")


def read_plain_csv(
    path: Path, required: dict[str, str], optional: dict[str, str], numeric: tuple[str, ...]
) -> dict[str, list] | None:
    """`read_columnar_csv`'s columns as plain lists."""
    cols = read_columnar_csv(path, required, optional, numeric)
    return None if cols is None else {k: v.tolist() for k, v in cols.items()}


def _header(path: Path) -> list[str] | None:
    """A CSV's header fields (BOM dropped), None when unreadable."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            for row in csv.reader(fh):
                if row:
                    return row
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def read_columnar_csv(
    path: Path, required: dict[str, str], optional: dict[str, str], numeric: tuple[str, ...], arrow_text: bool = False
) -> dict | None:
    """A regular profiler CSV's wanted columns as NumPy arrays, read by Arrow's CSV reader (its own threads,
    ~20x Python's csv module on a 20,000-row memory_record.csv): `required` and `optional` as in `read_csv`
    (other columns are skipped, not kept); `numeric` (our names) as float64, an empty or N/A cell as NaN and
    surrounding blanks (the profiler's trailing tabs) ignored; the rest as text (object arrays, or Arrow arrays with
    `arrow_text`: no Python string made), as written.

    None when the file is anything but plain (a required header missing, a header repeated, a row of another
    width, a number that is not one, an empty or N/A text cell, no data row): then `read_csv` reads it and
    reports its problems. For the files it reads, the same values as `read_csv`, numbers correctly rounded
    (Arrow's decimal-to-double conversion, like Python's float(); pandas' own parser is not)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    header = _header(path)
    if header is None:
        return None
    by_norm = {norm(k): v for k, v in {**required, **optional}.items()}
    names = [by_norm.get(norm(h)) for h in header]
    wanted = [(h, n) for h, n in zip(header, names) if n is not None]
    got = [n for _, n in wanted]
    if len(set(got)) != len(got) or not set(required.values()) <= set(got) or len(set(header)) != len(header):
        return None
    typed = _typed_columns(path, header, wanted, numeric, arrow_text)
    if typed is not None:
        return typed
    try:
        table = _arrow_csv(path, len(header), {f"c{header.index(h)}": pa.string() for h, _ in wanted})
    except (pa.ArrowInvalid, OSError):
        return None  # a row of another width, bytes that are not UTF-8, ...
    if not table.num_rows:
        return None
    na = pa.array(sorted(_NA_CELLS))
    cols: dict = {}
    for h, n in wanted:
        cells = table.column(f"c{header.index(h)}")
        if n in numeric:
            stripped = pc.utf8_trim_whitespace(cells)
            missing = pc.is_in(stripped, value_set=na)
            if pc.any(pc.and_not(pc.match_substring_regex(stripped, _NOT_NUMERIC.pattern), missing)).as_py():
                return None  # letters, underscores, blanks inside: not a plain number
            try:
                values = pc.cast(pc.if_else(missing, pa.scalar(None, pa.string()), stripped), pa.float64())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            cols[n] = values.to_numpy(zero_copy_only=False).astype("float64")
            cols[n][np.asarray(missing.to_numpy(zero_copy_only=False), dtype=bool)] = np.nan
        else:
            if pc.any(pc.is_in(cells, value_set=na)).as_py():
                return None
            cols[n] = cells.combine_chunks() if arrow_text else cells.to_numpy(zero_copy_only=False)
    return cols


#: a CSV at least this large is read by Arrow with its own threads (a real-size kernel_details.csv: ~10 MB); a
#: smaller one (a rank's ~1.5 MB memory_record.csv) in one block on the calling thread: ~15% less CPU per file
#: (thread hand-offs and block stitching), and a cluster's ranks already keep every core busy (worker processes)
ARROW_THREADS_MIN_BYTES = 8 << 20
#: the block one unthreaded read takes in (a file up to this size is tokenized as one block)
ARROW_BLOCK_BYTES = 4 << 20


def _arrow_csv(path: Path, width: int, column_types: dict, null_values: list[str] | None = None):
    """Arrow's CSV reader on a profiler CSV of `width` columns (named c0, c1, ...; the header row skipped), only the
    columns of `column_types`, typed as it says; `null_values` (if any) read as null, no other cell. Threads only
    for a file of ARROW_THREADS_MIN_BYTES or more."""
    from pyarrow import csv as pa_csv

    convert = {"null_values": null_values} if null_values is not None else {}
    threads = os.path.getsize(path) >= ARROW_THREADS_MIN_BYTES
    return pa_csv.read_csv(
        path,
        read_options=pa_csv.ReadOptions(
            column_names=[f"c{i}" for i in range(width)],
            skip_rows=1,
            use_threads=threads,
            **({} if threads else {"block_size": ARROW_BLOCK_BYTES}),
        ),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(
            include_columns=list(column_types),
            column_types=column_types,
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
            **convert,
        ),
    )


def _typed_columns(
    path: Path, header: list[str], wanted: list, numeric: tuple[str, ...], arrow_text: bool
) -> dict | None:
    """`read_columnar_csv`'s columns in one typed pass: Arrow converts the numbers while it reads (its own threads,
    the same correctly rounded conversion as its cast; blanks around a number ignored, an N/A cell null) and keeps
    the text as dictionary arrays with `arrow_text` (a memory file's few components and modules: no string per row).
    None when any cell is not that plain (a cell Arrow cannot convert, a number that is not finite, an N/A text
    cell, a row of another width, no data row): the caller then takes the cell-by-cell path, which decides."""
    import numpy as np
    import pyarrow as pa

    text_type = pa.dictionary(pa.int32(), pa.string()) if arrow_text else pa.string()
    names = {f"c{header.index(h)}": n for h, n in wanted}
    try:
        table = _arrow_csv(
            path,
            len(header),
            {c: pa.float64() if n in numeric else text_type for c, n in names.items()},
            null_values=sorted(_NA_CELLS),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    if not table.num_rows:
        return None
    cols: dict = {}
    for c, n in names.items():
        cells = table.column(c)
        if n in numeric:
            values = np.asarray(cells.to_numpy(zero_copy_only=False), dtype="float64")
            bad = ~np.isfinite(values)
            if bad.any() and (bad & ~np.asarray(cells.is_null().to_numpy(zero_copy_only=False), dtype=bool)).any():
                return None  # inf, nan written out: the cell-by-cell path decides
            cols[n] = values
            continue
        if cells.null_count:
            return None
        if arrow_text:
            cells = cells.unify_dictionaries().combine_chunks() if cells.num_chunks > 1 else cells.combine_chunks()
            if any(v in _NA_CELLS for v in cells.dictionary.to_pylist()):
                return None
            cols[n] = cells
        else:
            import pyarrow.compute as pc

            if pc.any(pc.is_in(cells, value_set=pa.array(sorted(_NA_CELLS)))).as_py():
                return None
            cols[n] = cells.to_numpy(zero_copy_only=False)
    return cols


def _check_complete(path: Path, df: pd.DataFrame) -> None:
    """A CSV the profiler finished has every field in its last row (a cut file usually does not)."""
    import csv

    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 65536))
            tail = fh.read()
    except OSError:
        return
    if not size or tail.endswith((b"\n", b"\r")) or not len(df):
        return
    last = tail.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
    fields = next(csv.reader([last]), [])
    if len(fields) < len(df.columns):
        raise ProfileFormatError(
            path, f"line {len(df) + 1} has {len(fields)} of {len(df.columns)} fields (file truncated?)"
        )


def read_json(path: Path):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    if not data.strip():
        raise ProfileFormatError(path, "file is empty")
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(data.rstrip()) - 1 or exc.msg.startswith("Unterminated string")
        what = "truncated JSON (file ends before the document does)" if at_end else "corrupt JSON"
        raise ProfileFormatError(path, f"{what}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError as exc:
        raise ProfileFormatError(path, f"not a UTF-8 JSON file ({exc.reason})") from None


# ---- rank identity -----------------------------------------------------------------------------


def rank_info(rank_dir: Path) -> dict:
    """Rank id, world size, device and config from profiler_info*.json / profiler_metadata.json."""
    info: dict = {"rank": None, "config": {}, "metadata": {}}
    cands = [
        rank_dir / n
        for n in sorted(os.listdir(rank_dir))  # (not Path.glob: ~10x slower per rank)
        if n.startswith("profiler_info") and n.endswith(".json")
    ]
    if cands:
        pi = read_json(cands[0])
        if not isinstance(pi, dict):
            raise ProfileFormatError(cands[0], "expected a JSON object")
        info["profiler_info"] = pi
        r = pi.get("rank_id")
        try:
            r = int(r) if r is not None and str(r).strip() != "" else None
        except ValueError:
            r = None
        if r is not None and r >= 0:
            info["rank"] = r
        if info["rank"] is None:
            m = re.search(r"profiler_info_(\d+)\.json$", cands[0].name)
            if m:
                info["rank"] = int(m.group(1))
        if "rank_size" in pi:
            info["world_size"] = pi.get("rank_size")
        info["config"] = pi.get("config") or {}
        for k in ("torch_npu_version", "cann_version", "mindspore_version", "ms_version"):
            if k in pi:
                info[k] = pi[k]
    md_path = rank_dir / "profiler_metadata.json"
    if md_path.exists():
        md = read_json(md_path)
        if isinstance(md, dict):
            info["metadata"] = md
            dist = md.get("distributed_args") or {}
            if info["rank"] is None and isinstance(dist.get("rank"), int):
                info["rank"] = dist["rank"]
            if dist.get("world_size"):
                info["world_size"] = dist.get("world_size")
    return info


def link_keys(m: pd.DataFrame) -> dict:
    """The key columns of a communication-matrix table as the profiler's dbs and msprof-analyze write it (step,
    hccl_op_name, group_name, src_rank, dst_rank, transport_type) under the `links` table's names."""
    return {
        "step": m["step"].map(step_of).astype("Int64"),
        "op_name": m["hccl_op_name"],
        "group": m["group_name"].astype(str),
        "src": pd.to_numeric(m["src_rank"]).astype("int64"),
        "dst": pd.to_numeric(m["dst_rank"]).astype("int64"),
        "transport": m["transport_type"],
    }


def base_meta(fmt: str, rank_dir: Path, info: dict) -> dict:
    """The meta every Ascend rank parser starts from: format, folder, profiler config, parallel groups and
    distributed args (from `rank_info`)."""
    return {
        "format": fmt,
        "rank_dir": str(rank_dir),
        "profiler_config": info.get("config", {}),
        "parallel_groups": parallel_groups(info.get("metadata", {})),
        "distributed_args": (info.get("metadata") or {}).get("distributed_args"),
    }


def parallel_groups(metadata: dict) -> dict:
    """Parallel groups from profiler_metadata.json (analyzers.groups.groups_from_metadata)."""

    return groups_from_metadata(metadata)


# ---- op classification -------------------------------------------------------------------------

_COMM_NAME = re.compile(
    r"^(hcom_|hccl|lccl)|^(allreduce|allgather|reducescatter|alltoallv?|broadcast|send|receive|recv)"
    r"(-op\d+|_\d|$)",
    re.IGNORECASE,
)


def is_comm_name(name: str) -> bool:
    return bool(_COMM_NAME.match(str(name)))


def categorize(names: pd.Series, core: pd.Series | None, types: pd.Series | None) -> pd.Series:
    """'communication' for HCCL ops (core type HCCL/COMMUNICATION, or an hcom_*/AllReduce-opN name), else
    'compute'. A known non-HCCL core type wins over the name (BroadcastTo on AI_VECTOR_CORE is compute)."""
    by_name = names.astype(str).str.match(_COMM_NAME)
    if core is not None:
        c = core.astype(str).str.upper()
        known = core.notna() & ~c.isin(["", "N/A", "NA", "NONE", "NAN"])
        comm = (
            c.isin(["HCCL", "COMMUNICATION", "LCCL"]) | (~known & by_name) | names.astype(str).str.startswith("hcom_")
        )
    else:
        comm = by_name
    if types is not None:
        comm |= types.astype(str).str.lower().str.startswith("hcom_")
    return pd.Series(np.where(comm, "communication", "compute"), index=names.index, dtype="object")


def step_of(key: str):
    """'step50' -> 50; 'step' / '' -> None."""
    m = re.search(r"(\d+)$", str(key))
    return int(m.group(1)) if m else None


TRANSPORTS = ("HCCS", "RDMA", "SDMA", "PCIE", "SIO")


def device_step_windows(step: pd.Series, start: pd.Series, end: pd.Series) -> pd.DataFrame:
    """Step windows on the device clock, as the Ascend profiler's step_trace_time defines them: a step
    starts at its first device op and lasts until the next step's first op (the gap before the next
    step is this step's Free time); the last step ends at its last op's end. Columns: step, start_us, end_us."""
    st = pd.to_numeric(pd.Series(step), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    s = np.asarray(start, dtype=float)
    e = np.asarray(end, dtype=float)
    ok = ~np.isnan(st)
    st, s, e = st[ok], s[ok], e[ok]
    if not len(st):
        return pd.DataFrame(
            {"step": pd.Series(dtype="int64"), "start_us": pd.Series(dtype=float), "end_us": pd.Series(dtype=float)}
        )
    ids, inv = np.unique(st, return_inverse=True)
    first = np.full(len(ids), np.inf)
    last = np.full(len(ids), -np.inf)
    np.minimum.at(first, inv, s)
    np.maximum.at(last, inv, e)
    order = np.argsort(first, kind="stable")
    ids, first, last = ids[order], first[order], last[order]
    nxt = np.append(first[1:], np.nan)
    end_w = np.where(~np.isnan(nxt) & (nxt >= last), nxt, last)
    return pd.DataFrame({"step": ids.astype("int64"), "start_us": first, "end_us": end_w})


# ---- what a rank was read from --------------------------------------------------------------------

_NA_TEXT = ("", "N/A", "NA", "NAN", "NONE", "NULL", "<NA>")


def na_to_none(col: pd.Series) -> pd.Series:
    """A text column with the profiler's "N/A" (and empty cells) as None. Both the text and the db
    exports write "N/A" where a level or version records no value (level-0 kernel types, core types):
    one rule for both, so analyses fall back the same way (e.g. the kernel name for an unknown type)."""
    col = col.astype(object)
    bad = col.isna() | col.astype(str).str.strip().str.upper().isin(_NA_TEXT)
    return col.where(~bad, None)


class RankInputs:
    """The files one rank was read from and the problems met, for `ranks.inputs` and `Profile.warnings`.

    `read(path, fn, *args)` calls `fn(path, *args)`; a damaged file (ProfileFormatError) becomes a
    warning naming the file and the result is None, so the rank keeps what its other files give.
    `need_rows=True`: a file that reads but holds no rows (a CSV cut to its header) is damaged too.
    `problems` lists them per file ({"file", "problem": "empty" | "unreadable", "detail"}) for the views."""

    def __init__(self) -> None:
        self.used: list[str] = []
        self.warnings: list[str] = []
        self.problems: list[dict] = []

    def read(self, path: Path, fn, *args, label: str | None = None, need_rows: bool = False, **kw):
        try:
            out = fn(path, *args, **kw)
        except ProfileFormatError as exc:
            self.warnings.append(f"{exc.path}: {exc.problem} (ignored: the rank is analyzed without it)")
            self.problems.append({"file": label or path.name, "problem": "unreadable", "detail": str(exc.problem)})
            return None
        if need_rows and out is not None and len(out) == 0:
            self.warnings.append(f"{path}: no data rows (header only; ignored: the rank is analyzed without it)")
            self.problems.append({"file": label or path.name, "problem": "empty", "detail": "no data rows"})
            return None
        self.add(label or path.name)
        return out

    def add(self, name: str) -> None:
        if name not in self.used:
            self.used.append(name)

    @property
    def text(self) -> str:
        return ",".join(self.used)
