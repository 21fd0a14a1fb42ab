"""What the default capture costs on the quickstart's own runs, as each run reports it.

Runs `perfbench sweep examples/quickstart.yaml` as it ships (real msrun, real MindSpore profiler at the default
`profile.level`), with `repeats: N` added, into one results folder, and reads each run's record:

  * profiler_overhead: median step time of the profiled steps / of the unprofiled measured steps - 1 (the cost
                       per recorded step; analyzers/analyses/step_metrics.py);
  * capture_cost:      the share of the run's training time after warm-up that the capture added: the profiled
                       steps' extra time over the unprofiled median plus the profiler's calls between steps
                       (window start, stop and raw-file write; analyzers/analyses/capture_cost.py);
  * capture_calls_s:   those calls' total time.

Medians per world size over the repeats (the runs of one repeat are adjacent in time).

    .venv/bin/python bench/bench_capture_cost.py --repeats 3 [--results DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.store import Store  # noqa: E402

KEYS = ("profiler_overhead", "capture_cost", "capture_calls_s", "step_time_s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--results", type=Path, help="results folder (default: a temporary one)")
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "quickstart.yaml")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = args.results or Path(tempfile.mkdtemp(prefix="capture-cost-"))
    cfg = yaml.safe_load(args.config.read_text())
    cfg["repeats"] = args.repeats
    cfg["name"] = "capture-cost"
    cfg_path = results / "capture-cost.yaml"
    results.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(cfg))
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    subprocess.run(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg_path), "--results", str(results), "--json"],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    runs = [r for r in Store(results, create=False).list_runs() if r.get("status") == "ok"]
    rows = [
        {
            "run_id": r["run_id"],
            "world_size": r["settings"]["world_size"],
            **{k: (r.get("metrics") or {}).get(k) for k in KEYS},
        }
        for r in runs
    ]
    by_ws: dict = {}
    for row in rows:
        by_ws.setdefault(row["world_size"], []).append(row)
    summary = {
        ws: {
            k: statistics.median([x[k] for x in rs if x[k] is not None]) if any(x[k] is not None for x in rs) else None
            for k in KEYS
        }
        | {"runs": len(rs)}
        for ws, rs in sorted(by_ws.items())
    }
    doc = {
        "config": str(args.config),
        "repeats": args.repeats,
        "results": str(results),
        "runs": rows,
        "median_by_world_size": summary,
        "load_start": load0,
        "load_end": load1,
    }
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"load average at the start {' '.join(load0)}, at the end {' '.join(load1)}")
    print(
        "| run | ranks | step ms | profiler_overhead (per recorded step) | capture_cost (share of the run) | capture "
        "calls ms |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['run_id']} | {row['world_size']} | {row['step_time_s'] * 1e3:.1f} | "
            f"{row['profiler_overhead'] * 100:+.1f}% | {row['capture_cost'] * 100:+.2f}% | "
            f"{row['capture_calls_s'] * 1e3:.1f} |"
        )
    for ws, s in summary.items():
        print(
            f"| **median, {ws} rank(s)** ({s['runs']} runs) | {ws} | {s['step_time_s'] * 1e3:.1f} | "
            f"**{s['profiler_overhead'] * 100:+.1f}%** | **{s['capture_cost'] * 100:+.2f}%** | "
            f"{s['capture_calls_s'] * 1e3:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
