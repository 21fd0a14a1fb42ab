"""The reference workloads' step times before and after the capture module (perfbench/capture/): the same small
ResNet-50 sweep run by the code of `--before` (a git revision, checked out into a temporary worktree; default: the
commit before perfbench.capture existed) and by this checkout, alternating, each a real msrun run with the same
settings, the same interpreter and the same MindSpore. Per run: the median step time and CPU time per step after
warm-up over all ranks; reported: per side the median over runs, and per pair (before, after run back to back)
after / before - 1 of the step time, median and range. The load average is printed with each run (the machine
is shared).

    .venv/bin/python bench/bench_runner_capture.py --pairs 4 [--before REV] [--world-size 1] [--json FILE]
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "b90e7d5"  # the parent of the commit that added perfbench/capture/


def sweep_file(folder: Path, name: str, world_size: int, steps: int) -> Path:
    cfg = {
        "name": name,
        "workload": "resnet50",
        "model": {"image_size": 32, "num_classes": 10, "width": 16, "layers": [1, 1, 1, 1]},
        "train": {"batch_size": 16, "steps": steps, "warmup_steps": 5},
        "profile": {"enabled": False, "steps": 1},
        "sweep": {"world_size": [world_size]},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_once(tree: Path, cfg: Path, results: Path) -> tuple[float, float]:
    """One sweep of one run with the code in `tree`; the median step time and the median CPU time per step (the
    rank process's, `cpu_s`: what the load stretches least) after warm-up, over its ranks, in seconds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    before = set((results / "runs").glob("*")) if (results / "runs").exists() else set()
    subprocess.run(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(results)],
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=900,
    )
    (run,) = set((results / "runs").glob("*")) - before
    times, cpu = [], []
    for f in (run / "artifacts" / "metrics").glob("rank*.steps.jsonl"):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec["step"] >= 5:
                times.append(rec["step_time_s"])
                cpu.append(rec["cpu_s"])
    return statistics.median(times), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--json")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-runner-capture-"))
    old = tmp / "before"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(old), a.before], cwd=ROOT, check=True, capture_output=True
    )
    try:
        sides = {"before": old, "after": ROOT}
        out: dict = {"before": [], "after": [], "before_cpu": [], "after_cpu": [], "load": [], "ratios": []}
        for i in range(a.pairs):
            pair = {}
            for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                cfg = sweep_file(tmp, f"{side}{i}", a.world_size, a.steps)
                s, c = run_once(sides[side], cfg, tmp / f"results-{side}")
                load = os.getloadavg()[0]
                pair[side] = s
                out[side].append(s)
                out[f"{side}_cpu"].append(c)
                out["load"].append(load)
                print(
                    f"pair {i} {side}: median step {s * 1e3:.1f} ms, CPU {c * 1e3:.1f} ms (load {load:.1f})", flush=True
                )
            out["ratios"].append(pair["after"] / pair["before"] - 1)
        summary = {
            "before_rev": a.before,
            "world_size": a.world_size,
            "step_ms_before": statistics.median(out["before"]) * 1e3,
            "step_ms_after": statistics.median(out["after"]) * 1e3,
            "cpu_ms_before": statistics.median(out["before_cpu"]) * 1e3,
            "cpu_ms_after": statistics.median(out["after_cpu"]) * 1e3,
            "after_vs_before_median": statistics.median(out["ratios"]),
            "after_vs_before_range": [min(out["ratios"]), max(out["ratios"])],
            "load_range": [min(out["load"]), max(out["load"])],
            "runs": out,
        }
        print(json.dumps(summary, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(summary, indent=1))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
