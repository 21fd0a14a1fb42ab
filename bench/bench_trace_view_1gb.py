"""Parse a ~1 GB trace_view.json: time and peak memory.

Generates the file in a temp dir (never in the repo) by replicating the real events of fixture set B
(level1 rank0 trace_view.json: Python, CANN, Ascend Hardware, HCCL, Overlap Analysis, counters ...),
shifting every copy's timestamps past the previous copy, until it reaches --size-gb. Then, each in a
fresh process (so peak RSS is that reader's own), measures:

  x_events   analyzers.parsers.trace_view.x_events (DuckDB streaming reader): all X events as a DataFrame
             plus pid/tid names; what the Ascend parser uses
  rank       analyzers.parsers.ascend.text.parse_text_rank(read_trace=True) on a rank folder whose
             trace_view.json is the big file (kernel_details etc. from the same fixture rank)
  iter       analyzers.parsers.trace_view.iter_events (ijson, one event at a time): constant memory

Targets: under 20 s and under 2 GB peak RSS for x_events on 1 GB.

Usage:
  .venv/bin/python bench/bench_trace_view_1gb.py [--size-gb 1.0] [--repeats 3] [--readers x_events,rank,iter]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANK = (
    ROOT.parent
    / "shared"
    / "fixtures"
    / "ascend"
    / "Ascend__msinsight"
    / "test"
    / "data"
    / "pytorch"
    / "text"
    / "level1"
    / "rank0_ascend_pt"
)

CHILD = r"""
import resource, sys, time
t = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
if kind == "x_events":
    from analyzers.parsers.trace_view import x_events
    te = x_events(path)
    n = len(te.x)
elif kind == "rank":
    from analyzers.parsers.ascend.text import parse_text_rank
    p = parse_text_rank(path, read_trace=True)
    n = len(p.ops)
else:
    from analyzers.parsers.trace_view import iter_events
    n = sum(1 for _ in iter_events(path))
dt = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
print(f"{dt:.3f} {ru.ru_maxrss / 1024:.1f} {n} {ru.ru_utime + ru.ru_stime:.3f}")
"""


def generate(dst: Path, size_gb: float) -> tuple[int, int]:
    events = json.loads((RANK / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    ts = [float(e["ts"]) for e in events if "ts" in e]
    span = max(ts) - min(ts) + 1000.0
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    target = int(size_gb * 1e9)
    copies = 0
    n = 0
    with open(dst, "w") as fh:
        fh.write("[")
        fh.write(",".join(json.dumps(e) for e in meta))
        n += len(meta)
        written = fh.tell()
        # serialize each event once, with its ts as a hole to fill per copy
        templates = []
        for e in body:
            if "ts" in e:
                a, b = json.dumps(dict(e, ts="\0TS\0")).split('"\\u0000TS\\u0000"')
                templates.append((a, float(e["ts"]), b))
            else:
                templates.append((json.dumps(e), None, ""))
        while written < target:
            shift = copies * span
            parts = [a if t is None else f'{a}"{t + shift:.3f}"{b}' for a, t, b in templates]
            fh.write("," + ",".join(parts))
            n += len(parts)
            copies += 1
            written = fh.tell()
        fh.write("]")
    return copies, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--readers", default="x_events,rank,iter")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="perfbench-tv1gb-"))
    try:
        rank = tmp / "rank0_ascend_pt"
        shutil.copytree(RANK, rank, ignore=shutil.ignore_patterns("trace_view.json"))
        big = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        t = time.perf_counter()
        copies, n = generate(big, args.size_gb)
        size = big.stat().st_size
        print(
            f"generated {size / 1e9:.2f} GB, {n} events ({copies} copies of the fixture) in "
            f"{time.perf_counter() - t:.1f} s: {big}",
            flush=True,
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        results = {}
        for kind in args.readers.split(","):
            target = str(rank) if kind == "rank" else str(big)
            runs = []
            for _ in range(args.repeats if kind != "iter" else 1):
                p = subprocess.run(
                    [sys.executable, "-c", CHILD, kind, target], capture_output=True, text=True, timeout=1800, env=env
                )
                if p.returncode != 0:
                    raise SystemExit(f"{kind} failed:\n{p.stderr[-3000:]}")
                dt, rss, cnt, cpu = p.stdout.strip().splitlines()[-1].split()
                runs.append((float(dt), float(rss), int(cnt), float(cpu)))
                print(
                    f"  {kind}: {float(dt):.2f} s wall, {float(cpu):.2f} s CPU, peak RSS {float(rss):.0f} MB, "
                    f"{cnt} rows (load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            results[kind] = runs
        print("\n| reader | file | runs | median wall (s) | median CPU (s) | max peak RSS (MB) | rows |")
        print("|---|---|---|---|---|---|---|")
        for kind, runs in results.items():
            print(
                f"| {kind} | {size / 1e9:.2f} GB | {len(runs)} | {statistics.median(r[0] for r in runs):.2f} | "
                f"{statistics.median(r[3] for r in runs):.2f} | {max(r[1] for r in runs):.0f} | {runs[0][2]} |"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
