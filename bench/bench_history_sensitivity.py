"""Sensitivity of `perfbench check --history` on this machine: detection rate of an injected slowdown and
false-alarm rate on clean runs, from a pool of real short 1-rank runs.

1. Pool (real msrun runs, `--make-pool`): one sweep of the tiny ResNet (width 8, ResNet-50 layout, 32x32,
   batch 4, 30 steps, 5 warm-up) with `inject.delay_ms` in {0, D} and `--repeats` repeats; repeats are the
   outer loop, so clean and slowed runs alternate in time and share the machine's load drift.
2. Trials (no new runs): each trial draws, without replacement, `--history` clean runs as the history (one
   point each, in random order) and `--current` runs as the newest entry: clean runs not in the history
   (false-alarm trial) or slowed runs (detection trial); the gate (perfbench.check.judge_series, the same
   code as `check --history`) judges throughput. A trial "alarms" when the verdict is regression.

    .venv/bin/python bench/bench_history_sensitivity.py --make-pool --pool /tmp/pool --delay-ms 3.5 --repeats 20
    .venv/bin/python bench/bench_history_sensitivity.py --pool /tmp/pool --delay-ms 3.5 --trials 10 200
    # a CPU-costing slowdown judged on CPU time per step (analyzers.step_cpu):
    .venv/bin/python bench/bench_history_sensitivity.py --make-pool --pool /tmp/pool-cpu --inject busy_ms \
        --delay-ms 4 --repeats 15 --metric step_cpu_s

The delay should be ~10% of the clean step time (check the printed median). Results in docs/check.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.check import judge_series  # noqa: E402
from perfbench.compare import step_samples  # noqa: E402
from perfbench.history import Point, Series  # noqa: E402
from perfbench.store import Store  # noqa: E402

POOL = """name: pool
workload: resnet50
model: {{image_size: 32, num_classes: 10, width: 8, layers: [3, 4, 6, 3]}}
train: {{batch_size: 4, steps: {steps}, warmup_steps: 5, seed: 0}}
profile: {{enabled: false, steps: 1}}
sweep: {{world_size: [1], {inject}: [0, {delay}]}}
repeats: {repeats}
"""


def make_pool(pool: Path, inject: str, delay: float, repeats: int, steps: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "pool.yaml"
        cfg.write_text(POOL.format(inject=inject, delay=delay, repeats=repeats, steps=steps))
        subprocess.run([sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(pool)], cwd=ROOT, check=True)


def load(pool: Path, inject: str, delay: float, metric: str) -> tuple[list[tuple], list[tuple]]:
    store = Store(pool, create=False)
    clean, slow = [], []
    for r in store.list_runs():
        if r.get("status") != "ok" or (r.get("metrics") or {}).get(metric) is None:
            continue
        item = (r["run_id"], float(r["metrics"][metric]), step_samples(store, r).get(metric, []))
        d = float(r["settings"].get(inject, 0))
        (clean if d == 0 else slow if abs(d - delay) < 1e-9 else []).append(item)
    return clean, slow


def trial(rng: random.Random, clean, slow, n_hist: int, n_cur: int, slowed: bool, metric: str, threshold: float,
          alpha: float) -> bool:
    picked = rng.sample(clean, n_hist + (0 if slowed else n_cur))
    hist, cur = picked[:n_hist], (rng.sample(slow, n_cur) if slowed else picked[n_hist:])
    pts = [Point(f"h{i}", f"h{i}", None, None, float(i), rid, 0, v, s) for i, (rid, v, s) in enumerate(hist)]
    pts += [Point("cur", "cur", None, None, float(n_hist), rid, k, v, s) for k, (rid, v, s) in enumerate(cur)]
    j = judge_series(Series("pool", {}, [], metric, pts), "cur", metric, threshold=threshold, alpha=alpha)
    return j["verdict"] == "regression"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, required=True, help="results dir of the pool sweep")
    ap.add_argument("--make-pool", action="store_true", help="run the pool sweep first (real msrun runs)")
    ap.add_argument("--delay-ms", type=float, required=True, help="the slowed runs' value of --inject")
    ap.add_argument("--inject", default="delay_ms", choices=("delay_ms", "busy_ms"),
                    help="delay_ms: the ranks sleep; busy_ms: they burn CPU (a slowdown that costs CPU, like code)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--history", type=int, default=8, help="clean history points per trial")
    ap.add_argument("--current", type=int, nargs="+", default=[1, 2, 3], help="runs (repeats) of the current entry")
    ap.add_argument("--trials", type=int, nargs="+", default=[10, 200])
    ap.add_argument("--metric", default="throughput")
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.make_pool:
        make_pool(args.pool, args.inject, args.delay_ms, args.repeats, args.steps)
    clean, slow = load(args.pool, args.inject, args.delay_ms, args.metric)
    cv = statistics.pstdev([v for _, v, _ in clean]) / statistics.mean([v for _, v, _ in clean])
    out = {"clean_runs": len(clean), "slowed_runs": len(slow), "delay_ms": args.delay_ms,
           "clean_median": statistics.median(v for _, v, _ in clean),
           "slowed_median": statistics.median(v for _, v, _ in slow) if slow else None,
           "clean_cv": cv, "history": args.history, "rows": []}
    for n_cur in args.current:
        for n in args.trials:
            rng = random.Random(args.seed)
            det = sum(trial(rng, clean, slow, args.history, n_cur, True, args.metric, args.threshold, args.alpha)
                      for _ in range(n))
            fa = sum(trial(rng, clean, slow, args.history, n_cur, False, args.metric, args.threshold, args.alpha)
                     for _ in range(n))
            out["rows"].append({"current_runs": n_cur, "trials": n, "detected": det, "false_alarms": fa})
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"pool: {len(clean)} clean, {len(slow)} slowed (+{args.delay_ms} ms/step) runs; {args.metric} median "
          f"{out['clean_median']:.4g} clean vs {out['slowed_median'] or float('nan'):.4g} slowed; clean run-to-run CV {cv:.0%}")
    print(f"{'current runs':>12} {'trials':>7} {'detected':>9} {'false alarms':>13}")
    for r in out["rows"]:
        print(f"{r['current_runs']:>12} {r['trials']:>7} {r['detected']:>9} {r['false_alarms']:>13}")


if __name__ == "__main__":
    main()
