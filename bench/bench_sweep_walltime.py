"""Wall time of a sweep and where it goes: msrun start-up (launch to first finished step), training,
ingest/analysis. Runs the quickstart sweep into a temporary results folder.

    .venv/bin/python bench/bench_sweep_walltime.py [--config examples/quickstart.yaml] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default=str(ROOT / "examples" / "quickstart.yaml"))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from perfbench.store import Store

    with tempfile.TemporaryDirectory(prefix="pb-bench-") as tmp:
        t0 = time.time()
        r = subprocess.run(
            [sys.executable, "-m", "perfbench", "sweep", args.config, "--results", tmp],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        total = time.time() - t0
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        rows = []
        store = Store(tmp)
        for rec in store.list_runs():
            steps = store.read_table(rec["run_id"], "workload_steps")
            started = rec["timings"]["started"]
            first_step_start = float(steps["start_ts"].min())
            last_step_end = float(steps["end_ts"].max())
            rows.append(
                {
                    "run": rec["run_id"].split("-", 3)[-1],
                    "world_size": rec["settings"]["world_size"],
                    "wall_s": rec["timings"]["wall_s"],
                    "startup_s": round(first_step_start - started, 1),  # msrun + import + cluster init
                    "training_s": round(last_step_end - first_step_start, 1),  # all steps incl. compile step
                    "after_training_s": round(
                        rec["timings"]["finished"] - last_step_end, 1
                    ),  # exit + profiler + ingest
                    "median_step_s": rec["metrics"].get("step_time_s"),
                }
            )
    out = {"config": args.config, "sweep_wall_s": round(total, 1), "runs": rows}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"sweep {args.config}: {total:.1f} s wall")
        print(f"{'run':<12}{'ranks':>6}{'wall s':>9}{'startup s':>11}{'training s':>12}{'after s':>9}{'step s':>9}")
        for x in rows:
            print(
                f"{x['run']:<12}{x['world_size']:>6}{x['wall_s']:>9.1f}{x['startup_s']:>11.1f}{x['training_s']:>12.1f}"
                f"{x['after_training_s']:>9.1f}{x['median_step_s']:>9.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
