"""Import msprof-analyze's own cluster output (`cluster_analysis_output/`): cluster_step_trace_time.csv
(per-rank breakdown rows; the `stage` rows are msprof-analyze's max over a stage and are skipped),
cluster_communication.json (per op and global rank, the communication.json structure) and
cluster_communication_matrix.json. There are no kernels in it, so the breakdown is the one in the file
(`reference_breakdown`; `analyze` uses it when a profile has no ops). Useful to put an existing
msprof-analyze result into the store and run slow-rank detection and advice on it (fixture set E)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from analyzers.ascend.common import comm_op_type, read_csv, read_json, step_of
from analyzers.ascend.text import STEP_TRACE_OPTIONAL, STEP_TRACE_REQUIRED, _f
from analyzers.parallel_groups import groups_from_communication_group
from analyzers.schema import COMM_BANDWIDTH, COMM_OPS, LINKS, RANKS, Profile, conform, empty
from perfbench.errors import ProfileFormatError

SOURCE = "msprof-analyze-cluster"
FILES = ("cluster_step_trace_time.csv", "cluster_communication.json")


def detect(d: Path) -> bool:
    return any((Path(d) / f).is_file() for f in FILES) and not (Path(d) / "ASCEND_PROFILER_OUTPUT").exists()


def parse(d: str | Path, **_) -> Profile:
    d = Path(d)
    ranks: set[int] = set()
    ref = None
    st = d / "cluster_step_trace_time.csv"
    if st.exists():
        req = {k: v for k, v in STEP_TRACE_REQUIRED.items()}
        df = read_csv(st, {**req, "Type": "type", "Index": "index"}, STEP_TRACE_OPTIONAL,
                      numeric=tuple(v for k, v in {**STEP_TRACE_REQUIRED, **STEP_TRACE_OPTIONAL}.items()
                                    if v not in ("step", "device")))
        df = df[df["type"].astype(str).str.lower() == "rank"].copy()
        bad = df[~df["index"].astype(str).str.strip().str.isdigit()]
        if len(bad):
            raise ProfileFormatError(st, f"rank row with a non-integer Index {bad['index'].iloc[0]!r}")
        df["rank"] = df["index"].astype(int)
        df["step"] = df["step"].map(lambda s: step_of(s) if step_of(s) is not None else 0).astype("int64")
        ref = df.drop(columns=["type", "index"])
        ranks |= set(df["rank"])
    co, cb = _comm(d / "cluster_communication.json") if (d / "cluster_communication.json").exists() else (None, None)
    if co is not None:
        ranks |= set(co["rank"])
    links = _matrix(d / "cluster_communication_matrix.json") if (d / "cluster_communication_matrix.json").exists() \
        else empty(LINKS)
    if not ranks:
        raise ProfileFormatError(d, "msprof-analyze cluster output without any rank rows")
    rk = pd.DataFrame([{"rank": r, "path": str(d), "world_size": len(ranks)} for r in sorted(ranks)])
    return Profile(source=SOURCE, path=str(d), ranks=conform(rk, RANKS),
                   comm_ops=conform(co if co is not None else empty(COMM_OPS), COMM_OPS),
                   comm_bandwidth=conform(cb if cb is not None else empty(COMM_BANDWIDTH), COMM_BANDWIDTH),
                   links=conform(links.assign(global_ranks=True), LINKS), reference_breakdown=ref,
                   meta={"format": SOURCE, "producer": "msprof-analyze",  # msprof-analyze writes global ranks
                         "parallel_groups": groups_from_communication_group(d / "communication_group.json")})


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
                    rows.append({"rank": int(rank), "step": step, "op_name": name, "op_type": comm_op_type(name),
                                 "group": group, "group_size": gsize, "start_us": _f(t.get("Start Timestamp(us)")),
                                 "elapse_ms": _f(t["Elapse Time(ms)"]), "transit_ms": _f(t.get("Transit Time(ms)")),
                                 "wait_ms": _f(t.get("Wait Time(ms)")),
                                 "synchronization_ms": _f(t.get("Synchronization Time(ms)")),
                                 "idle_ms": _f(t.get("Idle Time(ms)")), "wait_ratio": _f(t.get("Wait Time Ratio")),
                                 "rank_group": gkey})
                    for tr, b in (op.get("Communication Bandwidth Info") or {}).items():
                        if isinstance(b, dict) and (_f(b.get("Transit Size(MB)")) or _f(b.get("Transit Time(ms)"))):
                            bw.append({"rank": int(rank), "step": step, "op_name": name, "transport": tr,
                                       "size_mb": _f(b.get("Transit Size(MB)")), "time_ms": _f(b.get("Transit Time(ms)")),
                                       "bandwidth_gbps": _f(b.get("Bandwidth(GB/s)")), "group": group})
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
                    rows.append({"step": step_of(step_key), "op_name": name, "group": group, "src": int(src),
                                 "dst": int(dst), "transport": v.get("Transport Type"),
                                 "size_mb": _f(v.get("Transit Size(MB)")), "time_ms": _f(v.get("Transit Time(ms)")),
                                 "bandwidth_gbps": _f(v.get("Bandwidth(GB/s)"))})
    df = pd.DataFrame(rows) if rows else empty(LINKS)
    if len(df):
        df["step"] = df["step"].astype("Int64")
    return df
