"""The interleaved A/B gate (`perfbench check --ab`) under a load that changes during the job.

A background CPU hog (`--hog-procs` busy processes) is started and stopped at random while the jobs run (on and
off periods drawn from an exponential distribution with mean `--hog-period` s; each hog process is started by
this bench and killed by its pid, at the latest when the bench ends). Each trial runs two real A/B jobs of the CI
model (narrow ResNet-50 layout, width 8, 32x32, batch 4, 1 rank pinned to one core, `--steps` steps of which
10 warm-up, no profiler), `--pairs` pairs each:

* detection: candidate = `--set inject.busy_ms=X`, X = 10% of the CPU time per step of a calibration run
  (`--busy-ms` to give it): every rank burns X ms of CPU in every step, as 10% slower code would;
* false alarm: an A/A job (no --set): both sides identical.

Detected = exit code 1 in a detection job; false alarm = exit code 1 in an A/A job. The 1-minute load average is
sampled every 15 s. `--no-hog` runs the same without the hog (a quiet machine, when nothing else runs).

    .venv/bin/python bench/bench_gate_under_load.py --trials 10 --pairs 5 --json /tmp/gate-ab.json   # hours here
    .venv/bin/python bench/bench_gate_under_load.py --trials 1 --pairs 3                          # a small version

Results in docs/check.md ("The A/B gate under load").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_history_sensitivity import LoadSampler  # noqa: E402  (1-minute load average every 15 s)

#: the CI example's A/B run (examples/ci/ab-run.yaml: pinned to one core, kernel and dispatch pools at 1 thread)
CONFIG = """name: gate
workload: resnet50
model: {{image_size: 32, num_classes: 10, width: 8, layers: [3, 4, 6, 3]}}
train: {{batch_size: 4, steps: {steps}, warmup_steps: 10, seed: 0, kernel_threads: 1, dispatch_threads: 1}}
profile: {{enabled: false, steps: 1}}
launch: {{timeout_s: 900, stall_timeout_s: 300, bind_core: true}}
"""


class Hog(threading.Thread):
    """Starts and stops `procs` busy processes at random; `log` keeps (time, on) transitions."""

    def __init__(self, procs: int, period: float, seed: int = 0):
        super().__init__(daemon=True)
        self.procs_n, self.period, self.rng = procs, period, random.Random(seed)
        self.stop, self.procs, self.log = threading.Event(), [], []

    def _on(self):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.procs_n)]
        self.log.append((time.time(), True))

    def _off(self):
        for p in self.procs:
            try:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        self.procs = []
        self.log.append((time.time(), False))

    def run(self):
        on = False
        try:
            while not self.stop.is_set():
                (self._off if on else self._on)()
                on = not on
                self.stop.wait(min(self.rng.expovariate(1 / self.period), 4 * self.period))
        finally:
            self._off()

    def on_share(self, t_end: float) -> float:
        if not self.log:
            return 0.0
        on_time, t0 = 0.0, self.log[0][0]
        for (t, state), (t2, _) in zip(self.log, self.log[1:] + [(t_end, None)]):
            if state:
                on_time += t2 - t
        return on_time / max(1e-9, t_end - t0)


def perfbench(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfbench", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def calibrate(cfg: Path, results: Path, env: dict) -> float:
    """10% of the CPU time per step of one clean run (ms)."""
    from perfbench.store import Store

    r = perfbench("sweep", str(cfg), "--results", str(results), env=env)
    if r.returncode:
        raise SystemExit(f"calibration sweep failed: {r.stderr[-2000:]}")
    runs = [x for x in Store(results, create=False).list_runs() if x.get("status") == "ok"]
    cpu = max(runs, key=lambda x: (x.get("timings") or {}).get("started") or 0)["metrics"]["step_cpu_s"]
    return round(cpu * 1000 * 0.10, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10, help="detection jobs, and as many A/A jobs (default 10)")
    ap.add_argument("--pairs", type=int, default=5, help="pairs per A/B job (default 5)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--busy-ms", type=float, help="injected CPU ms per step (default: 10%% of a calibration run's)")
    ap.add_argument("--threshold", default="5%")
    ap.add_argument("--hog-procs", type=int, default=1, help="busy processes while the hog is on (default 1)")
    ap.add_argument("--hog-period", type=float, default=20.0, help="mean on/off period of the hog, s (default 20)")
    ap.add_argument("--no-hog", action="store_true", help="no background hog (a quiet-machine run)")
    ap.add_argument("--results", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    tmp = None
    if args.results is None:
        tmp = tempfile.TemporaryDirectory()
        args.results = Path(tmp.name)
    cfg = args.results / "gate.yaml"
    args.results.mkdir(parents=True, exist_ok=True)
    cfg.write_text(CONFIG.format(steps=args.steps))
    load = LoadSampler()
    load.start()
    t_start = time.time()
    busy = args.busy_ms if args.busy_ms is not None else calibrate(cfg, args.results, env)
    hog = None if args.no_hog else Hog(args.hog_procs, args.hog_period)
    if hog:
        hog.start()
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "busy_ms": busy,
        "pairs": args.pairs,
        "steps": args.steps,
        "hog": None if args.no_hog else {"procs": args.hog_procs, "period_s": args.hog_period},
        "jobs": [],
    }
    try:
        for t in range(args.trials):
            for kind, sets in (("detection", ["--set", f"inject.busy_ms={busy}"]), ("false-alarm", [])):
                t0 = time.time()
                r = perfbench(
                    "check",
                    "--ab",
                    str(cfg),
                    *sets,
                    "--pairs",
                    str(args.pairs),
                    "--threshold",
                    args.threshold,
                    "--results",
                    str(args.results),
                    "--json",
                    env=env,
                )
                try:
                    res = json.loads(r.stdout)
                except json.JSONDecodeError:
                    res = {"verdict": "error", "error": r.stderr[-1500:]}
                ms = {
                    m["metric"]: {k: m.get(k) for k in ("verdict", "change", "change_ci", "p_value", "n_pairs")}
                    for g in res.get("groups", [])
                    for m in g.get("metrics", [])
                }
                job = {
                    "trial": t,
                    "kind": kind,
                    "exit": r.returncode,
                    "verdict": res.get("verdict"),
                    "metrics": ms,
                    "wall_s": round(time.time() - t0, 1),
                    "job": res.get("job"),
                    "unsteady_pairs_kept": res.get("unsteady_pairs_kept"),
                    "replaced_pairs": sum(1 for p in res.get("pairs", []) if p.get("replaced")),
                }
                out["jobs"].append(job)
                print(
                    f"trial {t} {kind:11s} exit {r.returncode} {res.get('verdict')} "
                    + "; ".join(
                        f"{k} {v['change'] * 100:+.1f}% p={v['p_value']:.2g}"
                        if v.get("change") is not None
                        else f"{k} {v['verdict']}"
                        for k, v in ms.items()
                    )
                    + f"  ({job['wall_s']:.0f} s)",
                    flush=True,
                )
    finally:
        if hog:
            hog.stop.set()
            hog.join(timeout=30)
        load.stop.set()
    det = [j for j in out["jobs"] if j["kind"] == "detection"]
    fa = [j for j in out["jobs"] if j["kind"] == "false-alarm"]
    out.update(
        detected=sum(j["exit"] == 1 for j in det),
        detection_jobs=len(det),
        false_alarms=sum(j["exit"] == 1 for j in fa),
        aa_jobs=len(fa),
        load=[min(load.samples), statistics.median(load.samples), max(load.samples)] if load.samples else None,
        hog_on_share=hog.on_share(time.time()) if hog else 0.0,
        wall_s=round(time.time() - t_start, 1),
    )
    print(
        f"\ndetected {out['detected']}/{len(det)}, false alarms {out['false_alarms']}/{len(fa)}; busy_ms {busy}; "
        f"load (1-min, min/median/max) {out['load']}; hog on {out['hog_on_share'] * 100:.0f}% of the time; "
        f"{out['wall_s']:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
