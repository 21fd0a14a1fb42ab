"""Per-step cost of the MindSpore profiler's recording at each `profile.level`, measured interleaved in one
process (the quickstart's model: ResNet-50 3-4-6-3 width 16, 32x32, batch 8, GRAPH mode, CPU).

Why interleaved: on a shared machine a run's step times swing by tens of percent within seconds, so a
4-step profiled window compared with the steps after it (the run's own `profiler_overhead`, see
bench_profiler_overhead.py) cannot resolve a few percent. Here the real profiler (`mindspore.profiler.profile`
with the level's options, as workloads/runner.py sets them) runs on a schedule that alternates
`--off` unprofiled steps with 1 profiler warm-up step and `--on` recorded steps, `--cycles` times, so
every recorded step has unprofiled neighbours a second away under the same load. Per cycle: median of the
recorded steps / median of the unprofiled steps (the first unprofiled step after a window is skipped: the
profiler writes its files between those steps) - 1, for wall time and for the process's CPU time
(time.process_time(), all threads); reported: the median over cycles and its spread. The profiler's
after-training parse (`default`/`full`) is not part of a step and is not measured here.

    .venv/bin/python bench/bench_profiler_interleaved.py --levels light,default,full --cycles 10
    (each level in its own process, one after the other; `--json FILE` keeps the numbers)
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import quickstart_config  # noqa: E402


def measure(level: str, cycles: int, off: int, on: int, width: int, out: Path) -> dict:
    """One process: the quickstart model, `cycles` x (off unprofiled, 1 warm-up, on recorded) steps."""
    import mindspore as ms
    from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    import workloads.resnet50 as r50
    from workloads.runner import PROFILE_LEVELS, RunContext

    opts = PROFILE_LEVELS[level]
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    cfg = quickstart_config(f"interleaved-{level}", out, width, level)
    ctx = RunContext(cfg, 0, 1, out)
    wl = r50.build(ctx)
    step = 0
    for _ in range(5):  # compile and warm up, unprofiled
        ctx._begin_step(step)
        wl.train_step(step)
        step += 1
    tensorboard_trace_handler(str(out / "profile"), analyse_flag=False)
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=off, warmup=1, active=on, repeat=cycles),
        on_trace_ready=lambda _p: None,
        profile_memory=opts["profile_memory"],
        record_shapes=opts["record_shapes"],
        with_stack=opts["with_stack"],
    )
    period = off + 1 + on
    rows = []
    prof.start()
    for i in range(cycles * period):
        ctx._begin_step(step)
        t0, c0 = time.perf_counter(), time.process_time()
        wl.train_step(step)
        rows.append(
            {"cycle": i // period, "pos": i % period, "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}
        )
        prof.step()
        step += 1
    prof.stop()
    med = statistics.median
    res = {"level": level, "cycles": cycles, "off_steps": off, "on_steps": on, "rows": rows}
    for key in ("wall", "cpu"):
        per = []
        for c in range(cycles):
            rec = [r[key] for r in rows if r["cycle"] == c and r["pos"] > off]
            unp = [r[key] for r in rows if r["cycle"] == c and 0 < r["pos"] < off]
            per.append(med(rec) / med(unp) - 1)
        res[key] = {
            "median": med(per),
            "per_cycle": per,
            "recorded_step_s": med([r[key] for r in rows if r["pos"] > off]),
            "unprofiled_step_s": med([r[key] for r in rows if 0 < r["pos"] < off]),
        }
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="light,default,full")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--off", type=int, default=3, help="unprofiled steps per cycle (the first one is skipped)")
    ap.add_argument("--on", type=int, default=3, help="recorded steps per cycle")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: measure one level, print JSON
    args = ap.parse_args(argv)
    if args.one:
        out = Path(tempfile.mkdtemp(prefix="bench_interleaved_"))
        print("RESULT " + json.dumps(measure(args.one, args.cycles, args.off, args.on, args.width, out)), flush=True)
        return 0
    results = {}
    t0 = time.time()
    for level in args.levels.split(","):
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--one",
            level,
            "--cycles",
            str(args.cycles),
            "--off",
            str(args.off),
            "--on",
            str(args.on),
            "--width",
            str(args.width),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GLOG_v": "3"})
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"level {level} failed:\n{p.stderr[-3000:]}")
        results[level] = json.loads(line[7:])
        r = results[level]
        print(f"{level}: wall {100 * r['wall']['median']:+.1f}%  cpu {100 * r['cpu']['median']:+.1f}%", flush=True)
    load = os.getloadavg()

    def fmt(v):
        return f"{100 * v:+.1f}%"

    print(
        f"\n{args.cycles} cycles of {args.off} unprofiled + 1 warm-up + {args.on} recorded steps per level; "
        f"load average at the end {load[0]:.1f} (2 cores); {time.time() - t0:.0f} s"
    )
    print(
        "| level | CPU time: recorded / unprofiled − 1 (median over cycles) | cycles (min – max) | wall time (median) "
        "| cycles (min – max) | unprofiled step, wall / CPU ms |"
    )
    print("|---|---|---|---|---|---|")
    for level, r in results.items():
        c, w = r["cpu"], r["wall"]
        print(
            f"| {level} | {fmt(c['median'])} | {fmt(min(c['per_cycle']))} – {fmt(max(c['per_cycle']))} | "
            f"{fmt(w['median'])} | {fmt(min(w['per_cycle']))} – {fmt(max(w['per_cycle']))} | "
            f"{1000 * w['unprofiled_step_s']:.0f} / {1000 * c['unprofiled_step_s']:.0f} |"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"command": "python " + " ".join(sys.argv), "load": load, "levels": results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
