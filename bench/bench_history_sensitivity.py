"""Sensitivity of the history gate (`perfbench check --history`) on this machine, with real msrun runs: how
many injected 10% slowdowns it catches and how many clean runs it flags.

1. History (`--history` clean runs, one sweep): the tiny CI model on 1 rank (narrow ResNet-50 layout, width 8,
   32x32, batch 4, `--steps` steps of which 10 warm-up, no profiler). Each run becomes one history point.
2. Calibration: the injected slowdown is `inject.busy_ms` = 10% of the history's median gate value of
   `step_cpu_s` (the 10th percentile of the per-step CPU time, perfbench.regress.history.gate_value): on an idle machine
   that many ms of extra work per step is a 10% throughput loss. `busy_ms` burns CPU in the rank, as slower
   code would (`inject.delay_ms` sleeps: it costs wall time but no CPU time, so a CPU-time gate cannot see it).
3. Trials (one more sweep, `busy_ms` in {0, X}, `--trials` x `--current` repeats, repeats the outer loop so
   clean and slowed runs alternate in time and share the machine's load): trial k's current entry is the k-th
   `--current` clean runs (false-alarm trial) or slowed runs (detection trial), judged against the fixed history
   by perfbench.regress.history.judge_series (the code of `check --history`): E-Divisive + prediction test + per-step
   Mann-Whitney, threshold 5%, alpha 0.05. Every trial's current runs are its own; none is reused.
   `--history-mode spread` judges the same trials against a history whose points span the whole bench run (the
   history runs plus all clean trial runs except the trial's own, in time order), as a CI history spans days of
   different load; the default history is the `--history` runs made just before the trials.

The same trials are judged on each `--metric` (default: step_cpu_s, the gate's metric here, and throughput,
for comparison). The load average is sampled every 15 s while the runs train.

    .venv/bin/python bench/bench_history_sensitivity.py --make-pool --pool /tmp/gate-pool   # ~30-40 min here
    .venv/bin/python bench/bench_history_sensitivity.py --pool /tmp/gate-pool              # judge again, no runs

Results in docs/check.md and docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzers.catalogue import METRICS as CATALOGUE  # noqa: E402
from perfbench.regress.compare import step_samples  # noqa: E402
from perfbench.regress.history import Point, Series, gate_value, judge_series  # noqa: E402
from perfbench.store import Store  # noqa: E402

SWEEP = """name: {name}
workload: resnet50
model: {{image_size: 32, num_classes: 10, width: 8, layers: [3, 4, 6, 3]}}
train: {{batch_size: 4, steps: {steps}, warmup_steps: 10, seed: 0}}
profile: {{enabled: false, steps: 1}}
sweep: {{world_size: [1], busy_ms: {busy}}}
repeats: {repeats}
"""


class LoadSampler(threading.Thread):
    """1-minute load average every `every` seconds while the runs train."""

    def __init__(self, every: float = 15.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self.stop.wait(self.every)


def sweep(pool: Path, name: str, busy: list[float], repeats: int, steps: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / f"{name}.yaml"
        cfg.write_text(SWEEP.format(name=name, busy=json.dumps(busy), repeats=repeats, steps=steps))
        t0 = time.time()
        subprocess.run(
            [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(pool)], cwd=ROOT, check=True
        )
        return time.time() - t0


def runs_of(store: Store, name: str) -> list[dict]:
    """ok runs of the sweeps called `name`, in the order they ran."""
    rs = [r for r in store.list_runs() if r.get("status") == "ok" and str(r.get("sweep_id", "")).startswith(name + "-")]
    return sorted(rs, key=lambda r: (r.get("timings") or {}).get("started") or 0)


def point(store: Store, r: dict, entry: str, i: int, metric: str) -> Point:
    samples = step_samples(store, r).get(metric, [])
    value = (r.get("metrics") or {}).get(metric)
    return Point(
        entry,
        entry,
        None,
        None,
        float(i),
        r["run_id"],
        r["settings"].get("repeat"),
        value,
        samples,
        gate_value(value, samples, CATALOGUE[metric].better),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=Path, required=True, help="results dir holding (or to hold) the runs")
    ap.add_argument("--make-pool", action="store_true", help="run the history and trial sweeps first (real msrun)")
    ap.add_argument("--history", type=int, default=8, help="clean history runs (points)")
    ap.add_argument("--trials", type=int, default=10, help="detection trials, and as many false-alarm trials")
    ap.add_argument("--current", type=int, default=1, help="runs (repeats) in each trial's current entry")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument(
        "--slowdown",
        type=float,
        default=0.10,
        help="injected extra work per step, share of the history's CPU time per step (default 10%%)",
    )
    ap.add_argument(
        "--metric", action="append", dest="metrics", help="metrics to judge (default step_cpu_s, throughput)"
    )
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument(
        "--history-mode",
        choices=("first", "spread"),
        default="first",
        help="first: the history is the --history runs made before the trials (one time window); "
        "spread: those plus every clean trial run except the trial's own (points across the bench run)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    metrics = args.metrics or ["step_cpu_s", "throughput"]
    out: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "history_runs": args.history,
        "trials": args.trials,
        "current_runs": args.current,
        "steps": args.steps,
        "threshold": args.threshold,
        "alpha": args.alpha,
    }
    load = LoadSampler()
    if args.make_pool:
        load.start()
        out["history_sweep_s"] = sweep(args.pool, "gate-history", [0], args.history, args.steps)
    store = Store(args.pool, create=False)
    hist = runs_of(store, "gate-history")[: args.history]
    cpu_gate = statistics.median(point(store, r, "h", 0, "step_cpu_s").gate for r in hist)
    busy = round(args.slowdown * cpu_gate * 1000, 1)
    if args.make_pool:
        out["trial_sweep_s"] = sweep(args.pool, "gate-trials", [0, busy], args.trials * args.current, args.steps)
        load.stop.set()
        out["load_1min"] = {
            "min": min(load.samples),
            "median": statistics.median(load.samples),
            "max": max(load.samples),
            "samples": len(load.samples),
        }
    trials = runs_of(store, "gate-trials")
    busy_done = sorted({float(r["settings"].get("busy_ms", 0)) for r in trials} - {0.0})
    busy = busy_done[0] if busy_done else busy
    clean = [r for r in trials if float(r["settings"].get("busy_ms", 0)) == 0]
    slow = [r for r in trials if float(r["settings"].get("busy_ms", 0)) == busy]
    n = min(args.trials, len(clean) // args.current, len(slow) // args.current)
    out.update(
        busy_ms=busy,
        history_cpu_gate_ms=cpu_gate * 1000,
        clean_trial_runs=len(clean),
        slowed_trial_runs=len(slow),
        judged_trials=n,
        results={},
    )
    out["history_mode"] = args.history_mode
    for metric in metrics:
        rows = {"detected": 0, "false_alarms": 0, "verdicts": {"slowed": [], "clean": []}}
        for kind, pool in (("slowed", slow), ("clean", clean)):
            for k in range(n):
                picked = pool[k * args.current : (k + 1) * args.current]
                h_runs = hist
                if args.history_mode == "spread":  # the history runs and every clean trial run but this trial's,
                    # in time order: a history whose points span the whole run's load, as a CI history spans days
                    own = clean[k * args.current : (k + 1) * args.current]
                    h_runs = sorted(
                        [r for r in hist + clean if r not in own],
                        key=lambda r: (r.get("timings") or {}).get("started") or 0,
                    )
                h_pts = [point(store, r, f"h{i:02d}", i, metric) for i, r in enumerate(h_runs)]
                cur = [point(store, r, "cur", len(h_runs), metric) for r in picked]
                j = judge_series(
                    Series("ws1", {}, [], metric, h_pts + cur),
                    "cur",
                    metric,
                    threshold=args.threshold,
                    alpha=args.alpha,
                )
                rows["verdicts"][kind].append(
                    {
                        "verdict": j["verdict"],
                        "method": j.get("method"),
                        "worse_by": j.get("worse_by"),
                        "p": j.get("p_value"),
                    }
                )
                if j["verdict"] == "regression":
                    rows["detected" if kind == "slowed" else "false_alarms"] += 1
        gates = {
            kind: [point(store, r, "x", 0, metric).gate for r in pool]
            for kind, pool in (("history", hist), ("clean", clean), ("slowed", slow))
        }
        meds = {
            kind: [point(store, r, "x", 0, metric).value for r in pool]
            for kind, pool in (("history", hist), ("clean", clean), ("slowed", slow))
        }
        rows["gate_values"] = gates
        rows["run_medians"] = meds
        rows["effect"] = statistics.median(gates["slowed"]) / statistics.median(gates["clean"]) - 1 if n else None
        rows["history_cv"] = statistics.pstdev(gates["history"]) / statistics.mean(gates["history"])
        rows["history_median_cv"] = statistics.pstdev(meds["history"]) / statistics.mean(meds["history"])
        out["results"][metric] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print(
        f"history ({args.history_mode}): {len(hist)} clean runs; trials: {n} slowed (busy_ms {busy}, 10% of the "
        "history's CPU gate value "
        f"{cpu_gate * 1000:.1f} ms) + {n} clean, {args.current} run(s) each; load 1-min "
        + (
            f"{out['load_1min']['min']:.1f}-{out['load_1min']['max']:.1f} (median {out['load_1min']['median']:.1f})"
            if "load_1min" in out
            else "not sampled (no runs made)"
        )
    )
    print(f"{'metric':<12} {'detected':>9} {'false alarms':>13} {'effect (gate)':>14} {'history CV gate / median':>25}")
    for metric, r in out["results"].items():
        eff = "–" if r["effect"] is None else f"{r['effect'] * 100:+.1f}%"
        print(
            f"{metric:<12} {r['detected']:>6}/{n:<2} {r['false_alarms']:>10}/{n:<2} {eff:>14} "
            f"{r['history_cv'] * 100:>15.1f}% / {r['history_median_cv'] * 100:.1f}%"
        )


if __name__ == "__main__":
    main()
