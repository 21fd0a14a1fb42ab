"""Streaming reader for Chrome-trace JSON (`trace_view.json`, msprof timelines, MindSpore CPU traces).

Files can be gigabytes, so nothing here loads a whole file with `json.load`:

* `iter_events(path, phases=...)` streams events one at a time with ijson (C backend), yielding plain
  dicts whose `ts` and `dur` are floats (torch_npu writes `ts` as a string such as
  "1736408883731508.790"). Memory stays flat whatever the file size.
* `x_events(path)` returns the complete ("X") events as a DataFrame plus the pid/tid name maps from
  the metadata ("M") events. It uses DuckDB's streaming, multi-threaded JSON reader (about 10x faster
  than a Python loop) and falls back to `iter_events` if DuckDB cannot read the file shape; files under
  16 MB go straight to the ijson reader.

Both accept gzip-compressed files, and a top-level array (`[{...}, ...]`) or an object with a `traceEvents` array. A
truncated
or corrupt file raises `ProfileFormatError(path, problem)`.

Precision: timestamps are float64 microseconds; at epoch-scale values (~1.7e15 us) float64 resolves
0.25 us, which is the same quantization the Ascend profiler's own step_trace_time.csv shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from perfbench.errors import ProfileFormatError

X_COLUMNS = ["name", "pid", "tid", "ts", "dur", "cat"]
#: below this size x_events(engine="auto") uses the ijson reader (DuckDB start-up costs more than it saves)
SMALL_FILE_BYTES = 16 * 1024 * 1024


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def _open(path: Path):
    """The file's bytes, gunzipped when it is gzip (e.g. `perfbench trace -o run.json.gz`)."""
    if _is_gzip(path):
        import gzip

        return gzip.open(path, "rb")
    return open(path, "rb")


def _container_prefix(path: Path) -> str:
    """'item' for a top-level array, 'traceEvents.item' for {"traceEvents": [...]}."""
    try:
        with _open(path) as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not stripped:
        raise ProfileFormatError(path, "file is empty, expected a Chrome-trace JSON array")
    if stripped[:1] == b"[":
        return "item"
    if stripped[:1] == b"{":
        return "traceEvents.item"
    raise ProfileFormatError(path, f"not a Chrome-trace JSON file (starts with {stripped[:20]!r})")


def _to_float(v) -> float:
    if v is None or v == "":
        return float("nan")
    if isinstance(v, float):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def iter_events(path: str | os.PathLike, phases: Iterable[str] | None = None) -> Iterator[dict]:
    """Stream the events of a Chrome-trace file; `phases` (e.g. {"X", "M"}) filters on `ph`.

    Each event is a dict as in the file, except `ts` and `dur` (when present) are floats. The C
    backend of ijson rejects integers beyond int64 (msprof writes uint64 ids such as
    `connection_id` 18446744073709551615); then the pure-Python backend takes over where it stopped.
    """
    import ijson

    try:
        yield from _iter_events(Path(path), phases, ijson, skip=0)
    except _IntegerOverflow as stop:
        yield from _iter_events(Path(path), phases, ijson.get_backend("python"), skip=stop.events_done)


class _IntegerOverflow(Exception):
    def __init__(self, events_done: int):
        super().__init__(events_done)
        self.events_done = events_done


def _iter_events(path: Path, phases, backend, skip: int) -> Iterator[dict]:
    prefix = _container_prefix(path)
    wanted = set(phases) if phases is not None else None
    n = 0
    try:
        with _open(path) as fh:
            for ev in backend.items(fh, prefix, use_float=True):
                n += 1
                if n <= skip:
                    continue
                if not isinstance(ev, dict):
                    raise ProfileFormatError(path, f"event #{n} is a {type(ev).__name__}, expected an object")
                if wanted is not None and ev.get("ph") not in wanted:
                    continue
                if "ts" in ev:
                    ev["ts"] = _to_float(ev["ts"])
                if "dur" in ev:
                    ev["dur"] = _to_float(ev["dur"])
                yield ev
    except backend.common.IncompleteJSONError as exc:
        if "overflow" in str(exc).lower() and backend.backend_name != "python":
            raise _IntegerOverflow(n) from None
        raise ProfileFormatError(path, f"truncated or corrupt JSON after {n} events ({_short(exc)})") from None
    except backend.common.JSONError as exc:
        raise ProfileFormatError(path, f"corrupt JSON after {n} events ({_short(exc)})") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None


def _short(exc: Exception) -> str:
    s = str(exc).strip().splitlines()
    return (s[0] if s else type(exc).__name__)[:200]


@dataclass
class TraceEvents:
    """Complete events of one trace file and the names of its processes and threads."""

    x: pd.DataFrame  # columns: name, pid, tid, ts, dur, cat [, args]  (pid/tid as str, ts/dur float us)
    process_names: dict[str, str] = field(default_factory=dict)  # pid -> "Ascend Hardware", ...
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)  # (pid, tid) -> "Stream 2", ...

    def process(self, name: str) -> pd.DataFrame:
        """X events of the process(es) named `name`."""
        pids = [p for p, n in self.process_names.items() if n == name]
        return self.x[self.x["pid"].isin(pids)]


def x_events(
    path: str | os.PathLike,
    *,
    with_args: bool = False,
    args_prefix: str | None = None,
    args_fields: tuple[str, ...] | None = None,
    engine: str = "auto",
) -> TraceEvents:
    """All X events as a DataFrame plus pid/tid name maps. `engine`: "auto" | "duckdb" | "ijson".

    `with_args` adds an `args` column (dicts) for every event; `args_prefix` adds it only for events whose
    name starts with that prefix (others get None); `args_fields` limits the args dicts to those keys
    (values as strings), which lets DuckDB skip everything else in big traces.
    """
    if args_prefix is not None or args_fields:
        with_args = True
    path = Path(path)
    _container_prefix(path)  # clear errors for missing/empty/non-JSON files
    if engine == "auto" and (path.stat().st_size < SMALL_FILE_BYTES or _is_gzip(path)):
        engine = "ijson"  # small file: not worth starting DuckDB; gzip: streamed through gunzip
    if engine in ("auto", "duckdb"):
        try:
            return _x_events_duckdb(path, with_args, args_prefix, args_fields)
        except ProfileFormatError:
            raise
        except Exception:
            if engine == "duckdb":
                raise
    return _x_events_ijson(path, with_args, args_prefix, args_fields)


def _x_events_ijson(
    path: Path, with_args: bool, args_prefix: str | None = None, args_fields: tuple[str, ...] | None = None
) -> TraceEvents:
    cols: dict[str, list] = {c: [] for c in X_COLUMNS + (["args"] if with_args else [])}
    pnames: dict[str, str] = {}
    tnames: dict[tuple[str, str], str] = {}
    for ev in iter_events(path, phases=("X", "M")):
        if ev.get("ph") == "M":
            _meta(ev, pnames, tnames)
            continue
        cols["name"].append(ev.get("name"))
        cols["pid"].append(str(ev.get("pid")))
        cols["tid"].append(str(ev.get("tid")))
        cols["ts"].append(ev.get("ts", float("nan")))
        cols["dur"].append(ev.get("dur", 0.0))
        cols["cat"].append(ev.get("cat"))
        if with_args:
            keep = args_prefix is None or str(ev.get("name", "")).startswith(args_prefix)
            a = ev.get("args") if keep else None
            if a is not None and args_fields and isinstance(a, dict):
                a = {k: (None if a.get(k) is None else str(a.get(k))) for k in args_fields}
            cols["args"].append(a)
    df = pd.DataFrame(cols)
    df["ts"] = df["ts"].astype("float64")
    df["dur"] = df["dur"].astype("float64")
    return TraceEvents(df, pnames, tnames)


def _meta(ev: dict, pnames: dict, tnames: dict) -> None:
    args = ev.get("args") or {}
    name = args.get("name") if isinstance(args, dict) else None
    if name is None:
        return
    if ev.get("name") == "process_name":
        pnames[str(ev.get("pid"))] = str(name)
    elif ev.get("name") == "thread_name":
        tnames[(str(ev.get("pid")), str(ev.get("tid")))] = str(name)


def _x_events_duckdb(
    path: Path, with_args: bool, args_prefix: str | None = None, args_fields: tuple[str, ...] | None = None
) -> TraceEvents:
    import duckdb

    prefix = _container_prefix(path)
    if prefix != "item":
        # {"traceEvents": [...]} files are small legacy traces; the generic reader handles them
        raise ValueError("object-wrapped trace")
    con = duckdb.connect()
    try:
        con.execute(f"SET threads={max(1, min(4, os.cpu_count() or 1))}")
        con.execute("SET memory_limit='1GB'")
        con.execute("SET preserve_insertion_order=false")
        if args_fields:
            # typed struct: DuckDB skips every other key without building JSON values (fast)
            fields = ", ".join(f'"{f}" VARCHAR' for f in ("name", *args_fields) if f.replace("_", "").isalnum())
            args_type = f"STRUCT({fields})"
            meta_expr = "args.name"
        elif with_args:
            args_type = "JSON"
            meta_expr = "json_extract_string(args, '$.name')"
        else:
            args_type = "STRUCT(name VARCHAR)"
            meta_expr = "args.name"
        columns = (
            "{ph: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'VARCHAR', dur: 'VARCHAR', "
            f"cat: 'VARCHAR', args: '{args_type}'}}"
        )
        quoted = str(path).replace("'", "''")
        src = f"read_json('{quoted}', format='array', columns={columns}, maximum_object_size=268435456)"
        lit = (args_prefix or "").replace("'", "''")
        if args_fields:
            args_sel = (
                f", CASE WHEN ph = 'X' AND starts_with(name, '{lit}') THEN to_json(args)::VARCHAR END AS args"
                if args_prefix is not None
                else ", CASE WHEN ph = 'X' THEN to_json(args)::VARCHAR END AS args"
            )
        elif with_args:
            args_sel = (
                f", CASE WHEN ph = 'X' AND starts_with(name, '{lit}') THEN args::VARCHAR END AS args"
                if args_prefix is not None
                else ", CASE WHEN ph = 'X' THEN args::VARCHAR END AS args"
            )
        else:
            args_sel = ""
        query = (
            f"SELECT ph, name, pid, tid, TRY_CAST(trim(ts, ' \t') AS DOUBLE) AS ts, "
            f"COALESCE(TRY_CAST(trim(dur, ' \t') AS DOUBLE), 0.0) AS dur, cat, "
            f"CASE WHEN ph = 'M' THEN {meta_expr} END AS meta_name{args_sel} "
            f"FROM {src} WHERE ph = 'X' OR (ph = 'M' AND name IN ('process_name', 'thread_name'))"
        )
        try:
            allx = con.sql(query).to_arrow_table().to_pandas()
        except duckdb.InvalidInputException as exc:
            msg = str(exc)
            if (
                "Malformed JSON" in msg
                or "unexpected end" in msg.lower()
                or "Expected" in msg
                or "truncated" in msg.lower()
            ):
                raise ProfileFormatError(path, f"truncated or corrupt JSON ({msg.splitlines()[0][:200]})") from None
            raise
    finally:
        con.close()
    is_meta = (allx["ph"] == "M").to_numpy()
    meta = allx[is_meta]
    x = allx[~is_meta].drop(columns=["ph", "meta_name"]).reset_index(drop=True)
    pnames: dict[str, str] = {}
    tnames: dict[tuple[str, str], str] = {}
    for name, pid, tid, v in zip(meta["name"], meta["pid"], meta["tid"], meta["meta_name"]):
        if v is None or (isinstance(v, float) and v != v):
            continue
        if name == "process_name":
            pnames[str(pid)] = v
        else:
            tnames[(str(pid), str(tid))] = v
    if "args" in x.columns:
        import json

        x["args"] = pd.Series(
            [json.loads(v) if isinstance(v, str) else None for v in x["args"]], index=x.index, dtype="object"
        )
    x["ts"] = x["ts"].astype("float64")
    x["dur"] = x["dur"].astype("float64")
    return TraceEvents(x, pnames, tnames)
