"""Where a run's time goes before its first step, with and without msrun imported ahead (the warm spare), side
by side in one run.

    .venv/bin/python bench/bench_trial_startup.py [--pairs 2] [--repeats 3] [--keep DIR] [--json]

Each pair runs two `perfbench sweep`s of the same 2-rank point, `--repeats` runs each, one after the other:
"before" with PERFBENCH_WARM_MSRUN=0 (every run starts a fresh msrun, which imports MindSpore before it starts
the scheduler and the ranks), "after" with the default (from its second run on, msrun was imported while the
previous run trained; an "after" sweep's first run has nothing to take over and is reported apart). The
phases come from the runs' own timestamps (perfbench/startup.py: launcher, /proc create times, the ranks'
meta and first step); the table gives each phase's median over the runs of each kind. The model is a tiny
ResNet (the start-up does not depend on it but for build and compile), profiler off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {
    "name": "startup",
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"steps": 5, "warmup_steps": 1, "batch_size": 4},
    "profile": {"enabled": False, "steps": 2},
    "sweep": {"world_size": [2]},
}


def run_sweep(py: str, cfg_path: Path, results: Path, warm: bool) -> float:
    env = dict(os.environ, PERFBENCH_WARM_MSRUN="1" if warm else "0")
    t0 = time.time()
    r = subprocess.run(
        [py, "-m", "perfbench", "sweep", str(cfg_path), "--results", str(results)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"sweep failed: {r.stderr[-2000:]}")
    return time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", help="keep the results here (default: a temporary folder, removed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from perfbench.startup import PHASES, phases
    from perfbench.store import Store

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pb-startup-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    cfg_path = tmp / "startup.yaml"
    cfg_path.write_text(yaml.safe_dump(dict(CONFIG, repeats=args.repeats), sort_keys=False))
    rows: dict[str, list[dict]] = {"before": [], "after": [], "after, first run": []}
    load = [os.getloadavg()[0]]
    for i in range(args.pairs):
        for warm in (False, True):
            results = tmp / f"{'after' if warm else 'before'}-{i}"
            run_sweep(sys.executable, cfg_path, results, warm)
            load.append(os.getloadavg()[0])
            st = Store(results)
            for rec in sorted(st.list_runs(), key=lambda r: r["timings"]["started"]):
                ph = phases(rec, st.artifacts_dir(rec["run_id"]) / "metrics")
                ph["wall_s"] = rec["timings"].get("wall_s")
                was_warm = bool((rec.get("launch") or {}).get("startup", {}).get("warm"))
                kind = "before" if not warm else ("after" if was_warm else "after, first run")
                rows[kind].append(ph)
    names = [n for n, _ in PHASES] + ["total", "first_step_s", "wall_s"]

    def med(kind, name):
        vals = [r[name] for r in rows[kind] if r.get(name) is not None]
        return round(statistics.median(vals), 2) if vals else None

    out = {
        "runs": {k: len(v) for k, v in rows.items()},
        "median": {k: {n: med(k, n) for n in names} for k in rows},
        "load_avg_1min": [round(x, 1) for x in load],
        "per_run": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{'phase (s, median)':<20}" + "".join(f"{k:>20}" for k in rows))
        for n in names:
            print(f"{n:<20}" + "".join(f"{str(out['median'][k][n]):>20}" for k in rows))
        print(f"runs: {out['runs']}; load average {out['load_avg_1min']}")
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
