"""What sampling memory after every step costs: the runner's `memory_sample()` (one getrusage and one
/proc/self/statm read, workloads/runner.py) against the step time of the quickstart model (ResNet-50 3-4-6-3
width 16, 32x32, batch 8, GRAPH mode, CPU), measured side by side in one process.

Two numbers:
1. interleaved steps: cycles of `--block` steps without sampling then `--block` steps with it (the order flips
   every cycle, so neither side always follows the other). The wall time of a step here runs from one step's
   start to the next one's start, so the sample (taken after the step, as the runner does) is inside it. Per
   cycle: median with / median without - 1; reported: the median over cycles and its spread. On a shared
   machine this is noise-bound (a few percent either way), so also:
2. the call itself: median over `--calls` calls of memory_sample(), divided by the median step time.

    .venv/bin/python bench/bench_memory_sampling.py --cycles 20 --block 4 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--block", type=int, default=4, help="steps per side per cycle")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    t_start = time.time()
    import mindspore as ms

    import workloads.resnet50 as r50
    from bench.common import quickstart_config
    from workloads.runner import RunContext, memory_sample

    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    out = Path(tempfile.mkdtemp(prefix="bench_memory_sampling_"))
    cfg = quickstart_config("bench-memory-sampling", out, args.width, "off")
    ctx = RunContext(cfg, 0, 1, out)
    wl = r50.build(ctx)
    step = 0
    for _ in range(5):  # compile and warm up
        ctx._begin_step(step)
        wl.train_step(step)
        step += 1
    rows = []
    for c in range(args.cycles):
        order = (False, True) if c % 2 == 0 else (True, False)
        for sampling in order:
            for _ in range(args.block):
                ctx._begin_step(step)
                t0 = time.perf_counter()
                wl.train_step(step)
                if sampling:
                    memory_sample()
                t1 = time.perf_counter()
                rows.append({"cycle": c, "sampling": sampling, "step_s": t1 - t0, "start": t0})
                step += 1
    # wall per step = start of this step to start of the next (the last step of the loop has no successor)
    for a, b in zip(rows, rows[1:]):
        a["wall_s"] = b["start"] - a["start"]
    rows = rows[:-1]
    med = statistics.median
    per = []
    for c in range(args.cycles):
        on = [r["wall_s"] for r in rows if r["cycle"] == c and r["sampling"]]
        off = [r["wall_s"] for r in rows if r["cycle"] == c and not r["sampling"]]
        if on and off:
            per.append(med(on) / med(off) - 1)
    calls = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        memory_sample()
        calls.append(time.perf_counter() - t0)
    step_s = med(r["wall_s"] for r in rows if not r["sampling"])
    call_s = med(calls)
    load = os.getloadavg()
    res = {
        "command": "python " + " ".join(sys.argv),
        "load": load,
        "cycles": args.cycles,
        "block": args.block,
        "interleaved_median": med(per),
        "interleaved_per_cycle": per,
        "step_s": step_s,
        "call_s_median": call_s,
        "call_s_p99": sorted(calls)[int(0.99 * len(calls))],
        "call_share_of_step": call_s / step_s,
        "wall_s": time.time() - t_start,
    }
    print(
        f"{args.cycles} cycles x {args.block} steps per side; load average {load[0]:.1f} / {load[1]:.1f} (2 cores); "
        f"{res['wall_s']:.0f} s"
    )
    print("| measure | value |\n|---|---|")
    print(f"| step wall time without sampling (median) | {1000 * step_s:.1f} ms |")
    print(
        f"| interleaved: with / without sampling - 1 (median over cycles) | {100 * res['interleaved_median']:+.2f}% "
        f"(cycles {100 * min(per):+.1f}% to {100 * max(per):+.1f}%) |"
    )
    print(f"| memory_sample() call, median / p99 | {1e6 * call_s:.1f} / {1e6 * res['call_s_p99']:.1f} us |")
    print(f"| call / step time | {100 * res['call_share_of_step']:.4f}% |")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
