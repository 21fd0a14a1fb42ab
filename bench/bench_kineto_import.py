"""Import the PyTorch profiler (Kineto) traces of ../shared/fixtures/kineto with perfbench and with
HolisticTraceAnalysis, side by side: wall time and peak memory, one run each.

Each (tool, trace set) runs in a fresh Python process, so its peak resident set (ru_maxrss) is that tool's
own; the table also gives each tool's resident set after its imports, before it reads anything, so the
difference is what reading the trace costs.

  perfbench  analyzers.load_profile(folder): the Profile every analysis reads
  hta        hta.trace_analysis.TraceAnalysis(trace_dir=folder): HTA's parse (its analyses run on top of it)

Usage:
  .venv/bin/python bench/bench_kineto_import.py [--sets trace_filter,nccl_parser_config,...]
  .venv/bin/python bench/bench_kineto_import.py --scale-gb 1 [--scale-from ns_resolution_trace] [--tmp DIR] [--gzip]

--scale-gb: the 1 GB target. A real fixture trace (set R by default) scaled up to that many GB of JSON: its
events written again and again, each copy shifted in time past the previous one, its ProfilerStep numbers,
correlation ids and flow ids moved on so no two copies share one, one uncompressed `.pt.trace.json` (above
64 MB perfbench streams it in blocks of ~16 MB); `--gzip` writes it gzipped instead (`.pt.trace.json.gz`, read
through gzip on the fly). perfbench alone imports it (HTA's parse of a 1 GB trace does not fit this machine's
memory); wall time, CPU time and peak resident set are printed. The file is deleted after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "fixtures" / "kineto" / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
SETS = ("trace_filter", "nccl_parser_config", "ns_resolution_trace", "cpu_only", "amd_trace")

CHILD = r"""
import json, logging, resource, sys, time
tool, folder = sys.argv[1], sys.argv[2]
logging.disable(logging.WARNING)
import warnings; warnings.simplefilter("ignore")
if tool == "perfbench":
    import analyzers
    from analyzers.parsers.formats import formats
    formats()
else:
    from hta.trace_analysis import TraceAnalysis
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t, cpu = time.perf_counter(), time.process_time()
if tool == "perfbench":
    p = analyzers.load_profile(folder, workers=1)
    n = len(p.ops)
else:
    ta = TraceAnalysis(trace_dir=folder)
    n = sum(len(df) for df in ta.t.traces.values())
dt, cpu = time.perf_counter() - t, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "cpu_s": cpu, "base_mb": base / 1024, "peak_mb": peak / 1024, "rows": n}))
"""


def run(tool: str, folder: Path, timeout: float = 900) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        for f in folder.iterdir():  # HTA reads every file of its folder: a folder of links to the set's traces
            (Path(tmp) / f.name).symlink_to(f)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, tool, tmp],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, HTA_DISABLE_NS_ROUNDING="1"),
            timeout=timeout,
        )
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


#: what one copy moves its ids on by (above any correlation / flow id / step number of the fixtures' traces)
ID_STRIDE = 10_000_000
STEP_STRIDE = 1_000


def scale_trace(src: Path, out: Path, target_bytes: int, gz: bool = False) -> tuple[int, int]:
    """Write `src`'s events again and again into `out` until it holds `target_bytes` of JSON (gzipped when `gz`);
    returns (copies, events)."""
    import gzip
    import re

    import orjson

    raw = src.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.pop("traceEvents")
    ts = [float(e["ts"]) for e in events if "ts" in e]
    span = max(ts) - min(ts) + 1000.0
    step_re = re.compile(r"ProfilerStep#(\d+)")
    copies = written = 0
    with open(out, "wb") as raw_fh, gzip.open(raw_fh, "wb", compresslevel=1) if gz else raw_fh as fh:
        fh.write(orjson.dumps(doc)[:-1] + b', "traceEvents": [\n')
        first = True
        while fh.tell() < target_bytes:
            lines = []
            for e in events:
                e = dict(e)
                if "ts" in e and e.get("ph") != "M":
                    e["ts"] = float(e["ts"]) + copies * span
                if copies and "ProfilerStep#" in e.get("name", ""):
                    n = copies * STEP_STRIDE
                    e["name"] = step_re.sub(lambda m, n=n: f"ProfilerStep#{int(m.group(1)) + n}", e["name"])
                if "id" in e and isinstance(e["id"], int):
                    e["id"] += copies * ID_STRIDE
                args = e.get("args")
                if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                    e["args"] = dict(args, correlation=args["correlation"] + copies * ID_STRIDE)
                lines.append(orjson.dumps(e))
            fh.write((b"" if first else b",\n") + b",\n".join(lines))
            first = False
            copies += 1
            written += len(lines)
        fh.write(b"\n]}\n")
    return copies, written


def scaled(args) -> None:
    src = next((DATA / args.scale_from).iterdir())
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        out = Path(tmp) / ("rank-0.scaled.pt.trace.json" + (".gz" if args.gzip else ""))
        t = time.perf_counter()
        copies, events = scale_trace(src, out, int(args.scale_gb * 1e9), gz=args.gzip)
        size = out.stat().st_size
        print(
            f"{src.name} x {copies} copies: {events:,} events, {size / 1e9:.2f} GB on disk "
            f"({'gzipped' if args.gzip else 'JSON'}; written in {time.perf_counter() - t:.0f} s)",
            flush=True,
        )
        x = run("perfbench", Path(tmp), timeout=args.timeout)
    if "error" in x:
        raise SystemExit(f"perfbench failed: {x['error']}")
    print(
        f"perfbench: {x['s']:.1f} s wall, {x['cpu_s']:.1f} s CPU, peak {x['peak_mb']:.0f} MB "
        f"({x['base_mb']:.0f} MB after imports), {x['rows']:,} ops; load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--scale-gb", type=float, default=None, help="import one real trace scaled to this many GB")
    ap.add_argument("--scale-from", default="ns_resolution_trace", help="the set whose trace is scaled")
    ap.add_argument("--tmp", default=None, help="folder for the scaled trace (default: the system's temp)")
    ap.add_argument("--gzip", action="store_true", help="write the scaled trace gzipped (its JSON still --scale-gb)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one import may take")
    args = ap.parse_args()
    if args.scale_gb:
        scaled(args)
        return
    cols = (
        "set",
        "trace size (gz)",
        "perfbench s",
        "perfbench peak MB (after imports)",
        "HTA s",
        "HTA peak MB (after imports)",
    )
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        folder = DATA / name
        size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
        pb, h = run("perfbench", folder), run("hta", folder)

        def cell(x: dict) -> tuple[str, str]:
            if "error" in x:
                return "error", x["error"][:60]
            return f"{x['s']:.2f}", f"{x['peak_mb']:.0f} ({x['base_mb']:.0f})"

        print(f"| {name} | {size:.2f} MB | {' | '.join(cell(pb))} | {' | '.join(cell(h))} |", flush=True)


if __name__ == "__main__":
    main()
