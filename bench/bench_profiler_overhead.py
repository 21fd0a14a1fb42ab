"""Profiler overhead of the ResNet workload: steps with vs without the MindSpore profiler (real msrun).

Two comparisons, both from real runs launched through perfbench.launcher (msrun):
  1. same run:  median step time of the profiled window vs the unprofiled steps after it
                (skipping --settle steps right after the window, where the profiler parses its data);
  2. A/B runs:  the same step indices in an identical run with profiling switched off.
Also reported: the first step after the window (includes the online parse) and its excess.

    .venv/bin/python bench/bench_profiler_overhead.py --world-size 2 --steps 24 --profile-steps 6

Prints a table and writes the numbers as JSON (--json).  Numbers depend heavily on machine load:
report medians and ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench import launcher  # noqa: E402


def run_config(out: Path, name: str, args, profiled: bool) -> dict:
    return {
        "run_id": name, "workload": "resnet50", "world_size": args.world_size, "repeat": 0,
        "output_dir": str(out / name / "artifacts"), "threads_per_rank": 1,
        "model": {"image_size": args.image_size, "num_classes": 10, "width": args.width, "layers": args.layers},
        "train": {"batch_size": args.batch_size, "steps": args.steps, "warmup_steps": args.warmup, "seed": 0,
                  "lr": 0.05, "momentum": 0.9, "mode": "graph", "data": "synthetic"},
        "profile": {"enabled": profiled, "steps": args.profile_steps},
        "parallel": {"grad_compression": "none", "compression_ratio": 0.01, "comm_fusion": args.comm_fusion,
                     "fusion_impl": args.fusion_impl, "pipeline_stages": 1, "micro_batches": 1,
                     "pipeline_schedule": "1f1b"},
        "inject": {"crash_rank": None, "crash_step": None, "hang_rank": None, "hang_step": None, "delay_ms": 0},
    }


def launch(out: Path, name: str, args, profiled: bool, port: int) -> list[list[dict]]:
    cfg = run_config(out, name, args, profiled)
    art = Path(cfg["output_dir"])
    art.mkdir(parents=True, exist_ok=True)
    p = art / "run_config.json"
    p.write_text(json.dumps(cfg, indent=1))
    res = launcher.launch(p, cfg, {"master_port": port, "bind_core": "auto", "timeout_s": args.timeout,
                                   "stall_timeout_s": 180})
    if res.status != "ok":
        raise SystemExit(f"{name} failed: {res.reason}\n{res.log_tail}")
    ranks = []
    for r in range(args.world_size):
        lines = (art / "metrics" / f"rank{r}.steps.jsonl").read_text().splitlines()
        ranks.append([json.loads(x) for x in lines if x.strip()])
    return ranks


def step_times(ranks: list[list[dict]], steps) -> list[float]:
    """Per step, the slowest rank's step time (the step is as slow as its slowest rank)."""
    return [max(r[s]["step_time_s"] for r in ranks) for s in steps]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--layers", type=lambda s: [int(x) for x in s.split(",")], default=[3, 4, 6, 3])
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-steps", type=int, default=6)
    ap.add_argument("--settle", type=int, default=2, help="steps after the window left out of 'after window'")
    ap.add_argument("--comm-fusion", default="all")
    ap.add_argument("--fusion-impl", default="perfbench")
    ap.add_argument("--port", type=int, default=29120, help="msrun master port (engineer C's range 29100-29199)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        args.comm_fusion = float(args.comm_fusion)
    except ValueError:
        pass
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_prof_"))
    t0 = time.time()
    on = launch(out, "profiled", args, True, args.port)
    off = launch(out, "unprofiled", args, False, args.port + 1)
    w0, w1 = args.warmup, args.warmup + args.profile_steps
    window = range(w0, w1)
    after = range(w1 + args.settle, args.steps)
    med = statistics.median
    res = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + (argv if argv is not None else sys.argv[1:])),
        "config": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(args).items()},
        "window_steps": [w0, w1 - 1], "after_steps": [after.start, after.stop - 1],
        "profiled_run": {
            "window_median_s": med(step_times(on, window)),
            "after_median_s": med(step_times(on, after)),
            "first_after_window_s": step_times(on, [w1])[0],
        },
        "unprofiled_run": {
            "window_median_s": med(step_times(off, window)),
            "after_median_s": med(step_times(off, after)),
            "first_after_window_s": step_times(off, [w1])[0],
        },
        "wall_s": time.time() - t0,
    }
    p, u = res["profiled_run"], res["unprofiled_run"]
    res["ratio_same_run"] = p["window_median_s"] / p["after_median_s"]
    res["ratio_ab_window"] = p["window_median_s"] / u["window_median_s"]
    res["ratio_ab_after"] = p["after_median_s"] / u["after_median_s"]
    res["parse_excess_s"] = p["first_after_window_s"] - p["after_median_s"]
    print(f"steps {w0}-{w1 - 1} profiled; 'after' = steps {after.start}-{after.stop - 1}; "
          f"slowest rank per step; medians")
    print(f"{'':28s}{'window':>10s}{'after':>10s}{'1st after':>11s}")
    for name, d in (("profiled run", p), ("unprofiled run", u)):
        print(f"{name:28s}{d['window_median_s']:10.4f}{d['after_median_s']:10.4f}{d['first_after_window_s']:11.4f}")
    print(f"same run   window/after          {res['ratio_same_run']:.3f}")
    print(f"A/B        window (prof/unprof)  {res['ratio_ab_window']:.3f}")
    print(f"A/B        after  (prof/unprof)  {res['ratio_ab_after']:.3f}")
    print(f"online parse excess (1st step after window) {res['parse_excess_s']:.2f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
