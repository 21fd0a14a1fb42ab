"""A summary-mode cluster import's per-rank memory peaks, two ways over the same `memory_record.csv` files, side by
side: the path `perfbench analyze` takes (each rank's file read by Arrow, five columns, reduced to the rank's peaks by
`analyzers.memory_summary.rank_summary`; `read_text_memory(..., peaks_only=True)`) and one multi-threaded DuckDB
query over every rank's file (`read_csv` over the file list with `filename=true`, grouped by file and component: the
largest allocated / reserved / active MB, the timestamp of the first row at the allocated peak, a count of the cells
that would send a file back to the per-file path; rejected lines recorded per file with `store_rejects`).

Each way runs in a fresh process that has already imported numpy, pandas and pyarrow (an import has them anyway);
the DuckDB way pays for `import duckdb` inside its timing. Today's path runs in-process on one core ("arrow") and in
two forked worker processes ("arrow-2": `perfbench analyze`'s default `--workers` at 128 and 1,024 ranks); DuckDB
with its default threads (one per core). Rounds alternate the order; medians of wall and CPU time (user + sys of
the process, its threads and its workers). The run fails unless every way gives every file the same peaks.

Usage (the data made by bench_cluster_vs_msprof.py):
  .venv/bin/python bench/bench_cluster_vs_msprof.py --sets large-128,large-1024 --data-dir /tmp/scale-data --make-only
  .venv/bin/python bench/bench_memory_peaks_engines.py /tmp/scale-data/large-128 /tmp/scale-data/large-1024 \\
      --rounds 5,3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv" / "bin" / "python"
WAYS = ("arrow", "arrow-2", "duckdb")
#: the cells the Arrow path reads as unknown (analyzers.parsers.ascend.common._NA_CELLS)
NA = ["", "N/A", "NA", "nan", "None"]
#: memory_record.csv's headers the peaks need (analyzers.parsers.ascend.memory._RECORD_PEAKS)
WANT = {
    "comp": "Component",
    "ts": "Timestamp(us)",
    "alloc": "Total Allocated(MB)",
    "res": "Total Reserved(MB)",
    "act": "Total Active(MB)",
}


def today(files: list[str]) -> dict:
    """{file: peaks} the way a summary-mode import computes them."""
    from analyzers.memory_summary import rank_summary
    from analyzers.parsers.ascend.common import RankInputs
    from analyzers.parsers.ascend.memory import read_text_memory

    out = {}
    for f in files:
        got = read_text_memory(Path(f).parent, 0, RankInputs(), columns=True, arrow_text=True, peaks_only=True)
        out[f] = rank_summary(got["memory_records"].data, None, None)["peaks"] if got else None
    return out


def _header(path: str) -> tuple | None:
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return next((tuple(r) for r in csv.reader(fh) if r), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def duckdb_peaks(files: list[str]) -> dict:
    """{file: peaks} from one DuckDB query per distinct header; a file the query could not read plainly (a rejected
    line, an unknown component, an empty timestamp, a number that is not finite) is left to `today`."""
    import duckdb

    from analyzers.memory_summary import FRAMEWORK_COMPONENTS, PROCESS_COMPONENT, framework_component, no_peaks
    from analyzers.parsers.ascend.common import norm

    by_header: dict[tuple, list[str]] = {}
    rest = []
    for f in files:
        h = _header(f)
        if h is None or len(set(h)) != len(h):
            rest.append(f)
        else:
            by_header.setdefault(h, []).append(f)
    out: dict = {}
    con = duckdb.connect()
    for h, group in by_header.items():
        pos = {k: next((i for i, x in enumerate(h) if norm(x) == norm(v)), None) for k, v in WANT.items()}
        if pos["comp"] is None or pos["ts"] is None:
            rest.extend(group)
            continue
        numeric = {pos[k] for k in ("ts", "alloc", "res", "act")}
        types = {f"c{i}": "DOUBLE" if i in numeric else "VARCHAR" for i in range(len(h))}
        c = {k: f"c{i}" if i is not None else "NULL::DOUBLE" for k, i in pos.items()}
        have = [c[k] for k in ("ts", "alloc", "res", "act") if pos[k] is not None]
        odd = " OR ".join(f"isnan({x}) OR isinf({x})" for x in have)
        sql = (
            f"SELECT filename, {c['comp']}, max({c['alloc']}), max({c['res']}), max({c['act']}), "
            f"arg_max({c['ts']}, struct_pack(a := {c['alloc']}, t := -{c['ts']})) FILTER (WHERE {c['alloc']} IS NOT "
            f"NULL), count(*) FILTER (WHERE {c['ts']} IS NULL OR {odd}) "
            "FROM read_csv($files, header=true, columns=$types, nullstr=$na, filename=true, delim=',', quote='\"', "
            "escape='\"', auto_detect=false, ignore_errors=true, store_rejects=true) GROUP BY ALL"
        )
        rows = con.execute(sql, {"files": group, "types": types, "na": NA}).fetchall()
        rejected = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT s.file_path FROM reject_errors e JOIN reject_scans s USING (scan_id)"
            ).fetchall()
        }
        per: dict[str, list] = {}
        for f, *agg in rows:
            per.setdefault(f, []).append(agg)
        for f in group:
            aggs = per.get(f)
            if aggs is None or f in rejected or any(a[0] is None or a[5] for a in aggs):
                rest.append(f)
                continue
            comps: dict[str, list] = {}  # by stripped component (as the Arrow path strips it)
            for comp, a, r, v, at, _ in aggs:
                m = comps.setdefault(comp.strip(), [None, None, None, None])
                if a is not None and (m[0] is None or a >= m[0]):
                    m[3] = at if m[0] is None or a > m[0] else min(m[3], at)
                    m[0] = a
                for i, x in ((1, r), (2, v)):
                    m[i] = x if m[i] is None or (x is not None and x > m[i]) else m[i]
            pk = no_peaks()
            fw = framework_component([x for x in FRAMEWORK_COMPONENTS if x in comps])
            if fw is not None:
                m = comps[fw]
                pk["allocator"] = fw
                for i, k in enumerate(("allocated", "reserved", "active")):
                    pk[f"peak_{k}_bytes"] = m[i] * 1048576.0 if m[i] is not None else None
                if m[0] is not None:
                    pk["peak_at_us"] = m[3]
            if PROCESS_COMPONENT in comps and comps[PROCESS_COMPONENT][1] is not None:
                pk["peak_process_bytes"] = comps[PROCESS_COMPONENT][1] * 1048576.0
            out[f] = pk
    con.close()
    out.update(today(rest))
    return out


def _child(way: str, listing: str, result: str) -> None:
    """One timed way in this (fresh) process."""
    import resource
    import time

    import numpy  # noqa: F401  (what an import has loaded before the memory pass)
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import analyzers.memory_summary  # noqa: F401
    import analyzers.parsers.ascend.memory  # noqa: F401

    files = Path(listing).read_text().split()

    def cpu() -> float:
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    t0, c0 = time.perf_counter(), cpu()
    if way == "arrow":
        got = today(files)
    elif way == "arrow-2":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        got = {}
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
            for part in pool.map(today, [files[0::2], files[1::2]]):
                got.update(part)
    else:
        got = duckdb_peaks(files)
    wall, used = time.perf_counter() - t0, cpu() - c0
    Path(result).write_text(json.dumps({"wall": wall, "cpu": used, "peaks": got}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path, nargs="*", help="cluster folders (each rank's memory_record.csv is read)")
    ap.add_argument("--rounds", default="3", help="rounds per folder, one number or one per folder (comma-separated)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sys.path.insert(0, str(ROOT))
        _child(*args.child)
        return
    rounds = [int(x) for x in args.rounds.split(",")]
    with tempfile.TemporaryDirectory(prefix="perfbench-peaks-") as tmpd:
        tmp = Path(tmpd)
        for k, data in enumerate(args.data):
            files = sorted(str(p) for p in data.rglob("memory_record.csv"))
            listing = tmp / "files.txt"
            listing.write_text("\n".join(files))
            runs: dict[str, list] = {w: [] for w in WAYS}
            loads, first = [], None
            for i in range(rounds[min(k, len(rounds) - 1)]):
                for way in WAYS if i % 2 == 0 else WAYS[::-1]:
                    loads.append(os.getloadavg()[0])
                    res = tmp / "result.json"
                    cmd = [str(PY), __file__, "--child", way, str(listing), str(res)]
                    subprocess.run(cmd, check=True, cwd=ROOT)
                    got = json.loads(res.read_text())
                    if first is None:
                        first = got["peaks"]
                    elif got["peaks"] != first:
                        raise SystemExit(f"{data}: {way} gives other peaks than the first way")
                    runs[way].append((got["wall"], got["cpu"]))
            print(f"{data} ({len(files)} files, load {min(loads):.1f}-{max(loads):.1f}; identical peaks in every run)")
            for way, got in runs.items():
                wall, cpu = statistics.median(x[0] for x in got), statistics.median(x[1] for x in got)
                print(
                    f"  {way:8s} median wall {wall:6.2f} s  CPU {cpu:6.2f} s  ({cpu / len(files) * 1e3:.1f} ms per "
                    f"file)  each run wall {[round(x[0], 2) for x in got]} CPU {[round(x[1], 2) for x in got]}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
