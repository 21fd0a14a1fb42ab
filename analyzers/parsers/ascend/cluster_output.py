"""Import msprof-analyze's own cluster output (`cluster_analysis_output/`, msprof-analyze 26.x and earlier).

Read, whichever are there (text export first, then the db export, then the recipe folders):

* step breakdown per rank: `cluster_step_trace_time.csv` | `cluster_analysis.db` ClusterStepTraceTime
  (the `stage` rows are msprof-analyze's max over a stage and are skipped) | ClusterTimeSummary
  (`-m cluster_time_summary`: table or `ClusterTimeSummary/cluster_time_summary_*.csv`);
* per op and global rank communication: `cluster_communication.json` | ClusterCommunicationTime +
  ClusterCommunicationBandwidth (`cluster_analysis.db`, or `CommunicationTimeSum/` csv/db of
  `-m communication_time_sum`);
* links: `cluster_communication_matrix.json` | ClusterCommunicationMatrix (`cluster_analysis.db`, or
  `CommMatrixSum/` csv/db of `-m communication_matrix_sum`);
* groups: `communication_group.json` | CommunicationGroupMapping -> meta["parallel_groups"].

There are no kernels in it, so the breakdown is the one in the files (`reference_breakdown`). Alone, it
imports an existing msprof-analyze result (fixture set E); beside the rank folders it was made from,
`analyzers.parsers.load` uses it as a cross-check of perfbench's own reading of the ranks.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pandas as pd

from analyzers.parsers.ascend.common import comm_op_type, link_keys, read_csv, read_json, step_of
from analyzers.parsers.ascend.db import REF_COLS, open_db
from analyzers.parsers.ascend.text import STEP_TRACE_OPTIONAL, STEP_TRACE_REQUIRED, _f, time_info
from analyzers.groups import group_entry, groups_from_communication_group
from analyzers.schema import COMM_BANDWIDTH, COMM_OPS, LINKS, RANKS, Profile, conform, empty
from perfbench.errors import ProfileFormatError

SOURCE = "msprof-analyze-cluster"
FILES = (
    "cluster_step_trace_time.csv",
    "cluster_communication.json",
    "cluster_communication_matrix.json",
    "cluster_analysis.db",
)
#: folders msprof-analyze's recipes write their text (csv) or db results into
RECIPE_DIRS = ("CommunicationTimeSum", "CommMatrixSum", "ClusterTimeSummary")

_TIME_SUMMARY = {
    "step_us": ("stepTime", "Step Time(us)"),
    "computing_us": ("computation", "Computation(us)"),
    "communication_not_overlapped_us": (
        "communicationNotOverlapComputation",
        "Communication Not Overlap Computation(us)",
    ),
    "overlapped_us": ("communicationOverlapComputation", "Communication Overlap Computation(us)"),
    "communication_us": ("communication", "Communication(us)"),
    "free_us": ("free", "Free(us)"),
}


def detect(d: Path) -> bool:
    d = Path(d)
    if (d / "ASCEND_PROFILER_OUTPUT").exists():
        return False
    return any((d / f).is_file() for f in FILES) or any((d / r).is_dir() for r in RECIPE_DIRS)


def parse(d: str | Path, **_) -> Profile:
    d = Path(d)
    used: list[str] = []
    ref, ref_src = _step_trace(d, used)
    co, cb = _comm_any(d, used)
    links = _links_any(d, used)
    groups = _groups(d, used)
    ranks: set[int] = set()
    for df, col in ((ref, "rank"), (co, "rank")):
        if df is not None and len(df):
            ranks |= set(int(x) for x in df[col])
    if not ranks and links is not None and len(links):  # a matrix alone: the ranks its links join
        ranks = set(int(x) for x in pd.concat([links["src"], links["dst"]]))
    if not ranks:
        raise ProfileFormatError(d, "msprof-analyze cluster output without any rank rows")
    rk = pd.DataFrame(
        [{"rank": r, "path": str(d), "world_size": len(ranks), "inputs": ",".join(used)} for r in sorted(ranks)]
    )
    meta = {"format": SOURCE, "producer": "msprof-analyze", "inputs": used, "parallel_groups": groups}
    if ref_src:
        meta["reference_source"] = f"msprof-analyze {ref_src}"
    return Profile(
        source=SOURCE,
        path=str(d),
        ranks=conform(rk, RANKS),
        comm_ops=conform(co if co is not None else empty(COMM_OPS), COMM_OPS),
        comm_bandwidth=conform(cb if cb is not None else empty(COMM_BANDWIDTH), COMM_BANDWIDTH),
        links=conform((links if links is not None else empty(LINKS)).assign(global_ranks=True), LINKS),
        reference_breakdown=ref,  # msprof-analyze writes global ranks
        meta=meta,
    )


# ---- where a table is: the top-level db, a recipe folder's db, or a recipe folder's csv ----------------


def _dbs(d: Path) -> list[Path]:
    out = [d / "cluster_analysis.db"] + [d / r / "cluster_analysis.db" for r in RECIPE_DIRS]
    return [p for p in out if p.is_file()]


def _db_table(d: Path, table: str, used: list[str]) -> pd.DataFrame | None:
    for db in _dbs(d):
        with open_db(db) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if table in names:
                try:
                    df = pd.read_sql_query(f"SELECT * FROM [{table}]", con)
                except (sqlite3.DatabaseError, pd.errors.DatabaseError) as exc:
                    raise ProfileFormatError(db, f"table {table}: {exc}") from None
                used.append(f"{db.relative_to(d)}:{table}")
                return df
    return None


def _recipe_csv(d: Path, folder: str, pattern: str, used: list[str]) -> pd.DataFrame | None:
    files = sorted((d / folder).glob(pattern)) if (d / folder).is_dir() else []
    if not files:
        return None
    f = files[-1]  # recipes stamp their csv with the time: the newest wins
    try:
        df = pd.read_csv(f)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProfileFormatError(f, f"corrupt CSV ({str(exc).splitlines()[0][:160]})") from None
    used.append(str(f.relative_to(d)))
    return df


def _need(path, df: pd.DataFrame, cols) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ProfileFormatError(
            path, f"missing column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns[:12]))})"
        )


# ---- step breakdown ------------------------------------------------------------------------------------


def _step_trace(d: Path, used: list[str]):
    st = d / "cluster_step_trace_time.csv"
    num = tuple(v for v in {**STEP_TRACE_REQUIRED, **STEP_TRACE_OPTIONAL}.values() if v not in ("step", "device"))
    if st.exists():
        df = read_csv(st, {**STEP_TRACE_REQUIRED, "Type": "type", "Index": "index"}, STEP_TRACE_OPTIONAL, numeric=num)
        used.append(st.name)
        return _rank_rows(st, df), st.name
    df = _db_table(d, "ClusterStepTraceTime", used)
    if df is not None:
        _need(d / "cluster_analysis.db", df, ["step", "type", "index", "computing", "free"])
        return _rank_rows(d / "cluster_analysis.db", df.rename(columns=REF_COLS)), "ClusterStepTraceTime"
    df = _db_table(d, "ClusterTimeSummary", used)
    which = 0
    if df is None:
        df = _recipe_csv(d, "ClusterTimeSummary", "cluster_time_summary*.csv", used)
        which = 1
    if df is None:
        return None, None
    cols = {names[which]: ours for ours, names in _TIME_SUMMARY.items()}
    rank_col, step_col = ("rank", "step") if which == 0 else ("Rank", "Step")
    _need(d / "ClusterTimeSummary", df, [rank_col, step_col, *cols])
    ref = df.rename(columns={**cols, rank_col: "rank", step_col: "step"})
    ref["rank"] = pd.to_numeric(ref["rank"]).astype("int64")
    ref["step"] = ref["step"].map(lambda s: step_of(s) if step_of(s) is not None else 0).astype("int64")
    return ref[["rank", "step", *cols.values()]], "ClusterTimeSummary"


def _rank_rows(path, df: pd.DataFrame) -> pd.DataFrame:
    df = df[df["type"].astype(str).str.lower() == "rank"].copy()
    bad = df[~df["index"].astype(str).str.strip().str.replace(r"\.0$", "", regex=True).str.isdigit()]
    if len(bad):
        raise ProfileFormatError(path, f"rank row with a non-integer Index {bad['index'].iloc[0]!r}")
    df["rank"] = pd.to_numeric(df["index"]).astype("int64")
    df["step"] = df["step"].map(lambda s: step_of(s) if step_of(s) is not None else 0).astype("int64")
    return df.drop(columns=[c for c in ("type", "index", "dp_index", "pp_index", "tp_index") if c in df.columns])


# ---- communication -------------------------------------------------------------------------------------


#: where each cluster table may be, in order: its JSON file, its cluster_analysis.db table, its recipe's CSV output
CLUSTER_SOURCES = {
    "communication": (
        "cluster_communication.json",
        "ClusterCommunicationTime",
        "CommunicationTimeSum",
        "cluster_communication_time*.csv",
    ),
    "matrix": (
        "cluster_communication_matrix.json",
        "ClusterCommunicationMatrix",
        "CommMatrixSum",
        "cluster_communication_matrix*.csv",
    ),
}


def _first_of(d: Path, what: str, used: list[str]):
    """Where a cluster table (`CLUSTER_SOURCES`) is: the path of its JSON file when there is one (named in `used`),
    else the table from cluster_analysis.db, else from its recipe's CSV output; None when none has it."""
    json_name, table, recipe, pattern = CLUSTER_SOURCES[what]
    if (d / json_name).exists():
        used.append(json_name)
        return d / json_name
    return _db_or_csv(d, table, recipe, pattern, used)


def _db_or_csv(d: Path, table: str, recipe: str, pattern: str, used: list[str]):
    """A cluster table from cluster_analysis.db, else from its recipe's CSV output; None when neither has it."""
    t = _db_table(d, table, used)
    return t if t is not None else _recipe_csv(d, recipe, pattern, used)


def _comm_any(d: Path, used: list[str]):
    t = _first_of(d, "communication", used)
    if isinstance(t, Path):
        return _comm(t)
    if t is None:
        return None, None
    b = _db_or_csv(
        d, "ClusterCommunicationBandwidth", "CommunicationTimeSum", "cluster_communication_bandwidth*.csv", used
    )
    _need(d, t, ["step", "rank_id", "hccl_op_name", "group_name", "elapsed_time"])
    t = t[~t["hccl_op_name"].astype(str).str.startswith("Total Op Info")]
    num = lambda c: pd.to_numeric(t[c], errors="coerce") if c in t.columns else float("nan")  # noqa: E731
    co = pd.DataFrame(
        {
            "rank": pd.to_numeric(t["rank_id"]).astype("int64"),
            "step": t["step"].map(step_of),
            "op_name": t["hccl_op_name"],
            "op_type": t["hccl_op_name"].map(comm_op_type),
            "group": t["group_name"].astype(str),
            "group_size": pd.NA,
            "start_us": num("start_timestamp"),
            "elapse_ms": num("elapsed_time"),
            "transit_ms": num("transit_time"),
            "wait_ms": num("wait_time"),
            "synchronization_ms": num("synchronization_time"),
            "idle_ms": num("idle_time"),
            "wait_ratio": num("wait_time_ratio"),
            "synchronization_ratio": num("synchronization_time_ratio"),
        }
    )
    co["step"] = co["step"].astype("Int64")
    cb = empty(COMM_BANDWIDTH)
    if b is not None and len(b):
        _need(d, b, ["step", "rank_id", "hccl_op_name", "band_type", "transit_size", "transit_time", "bandwidth"])
        b = b[~b["hccl_op_name"].astype(str).str.startswith("Total Op Info")]
        # one row per packet-size bucket: the op x transport totals repeat on each
        b = b.drop_duplicates(subset=["step", "rank_id", "hccl_op_name", "group_name", "band_type"])
        cb = pd.DataFrame(
            {
                "rank": pd.to_numeric(b["rank_id"]).astype("int64"),
                "step": b["step"].map(step_of).astype("Int64"),
                "op_name": b["hccl_op_name"],
                "transport": b["band_type"],
                "size_mb": pd.to_numeric(b["transit_size"], errors="coerce"),
                "time_ms": pd.to_numeric(b["transit_time"], errors="coerce"),
                "bandwidth_gbps": pd.to_numeric(b["bandwidth"], errors="coerce"),
                "group": b["group_name"].astype(str),
            }
        )
        cb = cb[(cb["size_mb"] > 0) | (cb["time_ms"] > 0)]
    return co, cb


def _links_any(d: Path, used: list[str]):
    m = _first_of(d, "matrix", used)
    if isinstance(m, Path):
        return _matrix(m)
    if m is None:
        return None
    _need(d, m, ["step", "hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type", "bandwidth"])
    m = m[~m["hccl_op_name"].astype(str).str.startswith("Total Op Info")]
    df = pd.DataFrame(
        {
            **link_keys(m),
            "size_mb": pd.to_numeric(m.get("transit_size"), errors="coerce"),
            "time_ms": pd.to_numeric(m.get("transit_time"), errors="coerce"),
            "bandwidth_gbps": pd.to_numeric(m["bandwidth"], errors="coerce"),
        }
    )
    if "op_name" in m.columns:
        df["hccl_op_name"] = m["op_name"].to_numpy()
    return df


def _groups(d: Path, used: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    if (d / "communication_group.json").exists():
        read_json(d / "communication_group.json")  # a damaged file is named
        used.append("communication_group.json")
        return groups_from_communication_group(d / "communication_group.json")
    m = _db_table(d, "CommunicationGroupMapping", used)
    if m is not None and {"group_name", "rank_set"} <= set(m.columns):
        for g, rs, pg, typ in zip(
            m["group_name"], m["rank_set"], m.get("pg_name", [None] * len(m)), m.get("type", [None] * len(m))
        ):
            out[str(g)] = group_entry(_group_ranks(str(rs)), None, "CommunicationGroupMapping", pg or None, type=typ)
    return out


def _group_ranks(key: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", key)]


def _comm(path: Path):
    data = read_json(path)
    if not isinstance(data, dict):
        raise ProfileFormatError(path, "expected an object keyed by rank group")
    rows, bw = [], []
    for gkey, steps in data.items():
        if not isinstance(steps, dict):
            raise ProfileFormatError(path, f"group '{gkey}' should map steps to ops")
        gsize = len(_group_ranks(gkey)) if gkey != "p2p" else None
        for step_key, ops in steps.items():
            if not isinstance(ops, dict):
                raise ProfileFormatError(path, f"'{gkey}/{step_key}' should be an object of ops")
            step = step_of(step_key)
            for key, per_rank in ops.items():
                if key.startswith("Total Op Info") or not isinstance(per_rank, dict):
                    continue
                name, _, group = key.partition("@")
                for rank, op in per_rank.items():
                    if not str(rank).isdigit() or not isinstance(op, dict):
                        raise ProfileFormatError(path, f"op '{key}': '{rank}' is not a rank id with an object")
                    t = op.get("Communication Time Info") or {}
                    if "Elapse Time(ms)" not in t:
                        raise ProfileFormatError(path, f"op '{key}' rank {rank}: missing 'Elapse Time(ms)'")
                    rows.append(
                        {
                            "rank": int(rank),
                            "step": step,
                            "op_name": name,
                            "op_type": comm_op_type(name),
                            "group": group,
                            "group_size": gsize,
                            **time_info(t),
                            "wait_ratio": _f(t.get("Wait Time Ratio")),
                            "rank_group": gkey,
                        }
                    )
                    for tr, b in (op.get("Communication Bandwidth Info") or {}).items():
                        if isinstance(b, dict) and (_f(b.get("Transit Size(MB)")) or _f(b.get("Transit Time(ms)"))):
                            bw.append(
                                {
                                    "rank": int(rank),
                                    "step": step,
                                    "op_name": name,
                                    "transport": tr,
                                    "size_mb": _f(b.get("Transit Size(MB)")),
                                    "time_ms": _f(b.get("Transit Time(ms)")),
                                    "bandwidth_gbps": _f(b.get("Bandwidth(GB/s)")),
                                    "group": group,
                                }
                            )
    co = pd.DataFrame(rows) if rows else empty(COMM_OPS)
    cb = pd.DataFrame(bw) if bw else empty(COMM_BANDWIDTH)
    for df in (co, cb):
        if len(df):
            df["step"] = df["step"].astype("Int64")
    if len(co):
        co["group_size"] = co["group_size"].astype("Int64")
    return co, cb


def _matrix(path: Path) -> pd.DataFrame:
    data = read_json(path)
    rows = []
    if not isinstance(data, dict):
        raise ProfileFormatError(path, "expected an object keyed by rank group")
    for gkey, steps in data.items():
        for step_key, ops in (steps or {}).items():
            for key, pairs in (ops or {}).items():
                if key.startswith("Total Op Info") or not isinstance(pairs, dict):
                    continue
                name, _, group = key.partition("@")
                for pair, v in pairs.items():
                    src, _, dst = str(pair).partition("-")
                    if not (src.isdigit() and dst.isdigit()) or not isinstance(v, dict):
                        raise ProfileFormatError(path, f"link '{pair}' of '{key}' is not 'src-dst' with an object")
                    rows.append(
                        {
                            "step": step_of(step_key),
                            "op_name": name,
                            "group": group,
                            "src": int(src),
                            "dst": int(dst),
                            "transport": v.get("Transport Type"),
                            "size_mb": _f(v.get("Transit Size(MB)")),
                            "time_ms": _f(v.get("Transit Time(ms)")),
                            "bandwidth_gbps": _f(v.get("Bandwidth(GB/s)")),
                        }
                    )
    df = pd.DataFrame(rows) if rows else empty(LINKS)
    if len(df):
        df["step"] = df["step"].astype("Int64")
    return df
