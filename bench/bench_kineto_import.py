"""Import the PyTorch profiler (Kineto) traces of ../shared/fixtures/kineto with perfbench and with
HolisticTraceAnalysis, side by side: wall time and peak memory, one run each.

Each (tool, trace set) runs in a fresh Python process, so its peak resident set (ru_maxrss) is that tool's
own; the table also gives each tool's resident set after its imports, before it reads anything, so the
difference is what reading the trace costs.

  perfbench  analyzers.load_profile(folder): the Profile every analysis reads
  hta        hta.trace_analysis.TraceAnalysis(trace_dir=folder): HTA's parse (its analyses run on top of it)

Usage:
  .venv/bin/python bench/bench_kineto_import.py [--sets trace_filter,nccl_parser_config,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
t = time.perf_counter()
if tool == "perfbench":
    p = analyzers.load_profile(folder, workers=1)
    n = len(p.ops)
else:
    ta = TraceAnalysis(trace_dir=folder)
    n = sum(len(df) for df in ta.t.traces.values())
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "base_mb": base / 1024, "peak_mb": peak / 1024, "rows": n}))
"""


def run(tool: str, folder: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        for f in folder.iterdir():  # HTA reads every file of its folder: a folder of links to the set's traces
            (Path(tmp) / f.name).symlink_to(f)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, tool, tmp],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, HTA_DISABLE_NS_ROUNDING="1"),
            timeout=900,
        )
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args()
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
