"""Profiler overhead per `profile.level` on the quickstart's own runs (real msrun, real MindSpore profiler).

For each round, one run per level (`off` = profiler disabled, then each profiled level, their order
rotated from round to round), launched back to back through perfbench.run.launcher with the quickstart's model and
schedule (ResNet-50 3-4-6-3 width 16,
32x32, batch 8 per rank, 14 steps, 3 warm-up, 4 profiled). Per run:
  * reported:  the run's own `profiler_overhead` as ingest reports it = median step time of the profiled
               steps / median step time of the unprofiled measured steps of the same run - 1
               (step time = the slowest rank's, per step);
  * A/B:       median step time of the profiled window / the same steps of the round's `off` run - 1,
               divided by the same ratio for the steps after the window (the control: no profiler in
               either run there), i.e. drift between the two runs cancels;
  * cpu:       the same ratio as `reported` on each step's CPU time (`cpu_s` in the step records: CPU seconds
               of the rank process, all threads, during the step; max over ranks) — the profiler's cost is
               CPU work of the rank itself, and CPU time does not count the time other processes hold the
               cores, so it resolves what wall time cannot on a loaded machine;
  * placebo:   the `reported` estimator applied to the round's `off` run (same step indices, nothing
               profiled): its spread is the estimator's own noise floor at the load of the moment;
  * after:     wall seconds from the last step's end to the last rank's exit (MindSpore's own parse runs
               there at `default`/`full`; never inside the training loop);
  * files:     what the level wrote per rank (FRAMEWORK/cpu_op_* is what analyzers.parsers.cpu reads).
Medians over rounds.

    .venv/bin/python bench/bench_profiler_overhead.py --world-size 1 --rounds 5
    .venv/bin/python bench/bench_profiler_overhead.py --world-size 2 --rounds 3 --port 29130
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

from bench.common import quickstart_config  # noqa: E402
from perfbench.run import launcher  # noqa: E402
from workloads.runner import PROFILE_LEVELS  # noqa: E402


def run_config(out: Path, name: str, args, level: str) -> dict:
    cfg = quickstart_config(
        name,
        out / name / "artifacts",
        args.width,
        level,
        world_size=args.world_size,
        threads_per_rank=1,
        inject={"crash_rank": None, "crash_step": None, "hang_rank": None, "hang_step": None, "delay_ms": 0},
    )
    cfg["train"].update(steps=args.steps, warmup_steps=args.warmup)
    cfg["profile"] = {"enabled": level != "off", "steps": args.profile_steps, "level": level}
    return cfg


def launch(out: Path, name: str, args, level: str, port: int) -> dict:
    cfg = run_config(out, name, args, level)
    art = Path(cfg["output_dir"])
    art.mkdir(parents=True, exist_ok=True)
    p = art / "run_config.json"
    p.write_text(json.dumps(cfg, indent=1))
    t0 = time.time()
    res = launcher.launch(
        p, cfg, {"master_port": port, "bind_core": "auto", "timeout_s": args.timeout, "stall_timeout_s": 300}
    )
    exited = time.time()
    if res.status != "ok":
        raise SystemExit(f"{name} failed: {res.reason}\n{res.log_tail}")
    ranks = []
    for r in range(args.world_size):
        lines = (art / "metrics" / f"rank{r}.steps.jsonl").read_text().splitlines()
        ranks.append([json.loads(x) for x in lines if x.strip()])
    files = (
        sorted(
            {
                f.relative_to(f.parents[1]).as_posix().replace("_0.", "_{rank}.")
                for f in (art / "profile").rglob("*")
                if f.is_file() and f.parent.name != "logs" and f.name.endswith(("_0.txt", "_0.csv", ".json"))
            }
        )
        if (art / "profile").exists()
        else []
    )
    last_end = max(r[-1]["end_ts"] for r in ranks)
    return {"ranks": ranks, "after_s": exited - last_end, "wall_s": exited - t0, "files": files}


def step_times(ranks: list[list[dict]], steps, key: str = "step_time_s") -> list[float]:
    """Per step, the slowest rank's step time (the step is as slow as its slowest rank); `key="cpu_s"`: the
    largest CPU time of a rank in that step."""
    return [max(r[s][key] for r in ranks) for s in steps]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world-size", type=int, default=1)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=4)
    ap.add_argument("--levels", default=",".join(k for k in PROFILE_LEVELS if k != "off"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=29120, help="msrun master port (each run takes the next one)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    levels = ["off"] + [x for x in args.levels.split(",") if x != "off"]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench_prof_"))
    med = statistics.median
    w0, w1 = args.warmup, args.warmup + args.profile_steps
    window, after = range(w0, w1), range(w1, args.steps)
    per: dict[str, dict[str, list]] = {
        lv: {"reported": [], "ab": [], "cpu": [], "after_s": [], "files": None} for lv in levels
    }
    port = args.port
    t0 = time.time()
    for rnd in range(args.rounds):
        base = None
        k = rnd % (len(levels) - 1)  # `off` first (the A/B base), the profiled levels rotated: no level always
        order = ["off"] + levels[1:][k:] + levels[1:][:k]  # runs right after the previous run's teardown
        for lv in order:
            r = launch(out, f"r{rnd}-{lv}", args, lv, port)
            port += 1
            win, aft = med(step_times(r["ranks"], window)), med(step_times(r["ranks"], after))
            cwin, caft = med(step_times(r["ranks"], window, "cpu_s")), med(step_times(r["ranks"], after, "cpu_s"))
            per[lv]["reported"].append(win / aft - 1)  # the run's own profiler_overhead (off: the placebo)
            per[lv]["cpu"].append(cwin / caft - 1)
            if lv == "off":
                base = (win, aft)
            else:
                per[lv]["ab"].append((win / base[0]) / (aft / base[1]) - 1)
            per[lv]["after_s"].append(r["after_s"])
            per[lv]["files"] = r["files"]
            print(
                f"round {rnd} {lv:8s} window {win:.4f} s  after {aft:.4f} s  cpu {cwin:.4f}/{caft:.4f} s  "
                f"exit {r['after_s']:.1f} s",
                flush=True,
            )
    res = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + (argv if argv is not None else sys.argv[1:])),
        "config": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(args).items()},
        "wall_s": time.time() - t0,
        "levels": {},
    }
    print(f"\n{args.world_size} rank(s), {args.rounds} rounds; medians over rounds")
    print(
        "| level | reported profiler_overhead (off: placebo) | rounds | same on CPU time | rounds | "
        "A/B vs off (drift-corrected) | last step → exit s | files per rank |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for lv in levels:
        d = per[lv]
        row = {
            "reported_median": med(d["reported"]) if d["reported"] else None,
            "reported": d["reported"],
            "ab_median": med(d["ab"]) if d["ab"] else None,
            "ab": d["ab"],
            "cpu_median": med(d["cpu"]) if d["cpu"] else None,
            "cpu": d["cpu"],
            "after_exit_median_s": med(d["after_s"]),
            "files": d["files"],
        }
        res["levels"][lv] = row

        def fmt(v):
            return "–" if v is None else f"{100 * v:+.1f}%"

        def rounds(xs):
            return ", ".join(fmt(x) for x in xs)

        print(
            f"| {lv} | {fmt(row['reported_median'])} | {rounds(d['reported'])} | {fmt(row['cpu_median'])} | "
            f"{rounds(d['cpu'])} | {fmt(row['ab_median'])} | {row['after_exit_median_s']:.1f} | "
            f"{', '.join(d['files'] or []) or '–'} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
