"""Validation of `perfbench predict`: fit on some runs of a real sweep on this machine, predict the others.

Runs bench/predict/ws1.yaml (1 rank, micro-batches 1/2/4) and bench/predict/ws2.yaml (2 ranks, comm_fusion
0/1/all x grad_compression none/fp16 x micro-batches 1/2) with msrun into a results folder, calibrates the
model on FIT (one run per knob on each of the two code paths: 1 rank, 2 micro-batches, per-tensor and
single-buffer all-reduce, fp16, each with M = 1 (the compiled step) and with M = 2 on 2 ranks (the host loop
that runs the same gradient exchange op by op), and predicts every other run (other bucket sizes, compression
with other buckets, other micro-batch counts, their combinations). With a single M > 1 run in the fit the
micro-batch path's cost would be calibrated on one exchange variant only. Reports per held-out run the measured and
predicted step time, the absolute % error, their median and the worst case, and the replay error on the
real Ascend fixtures (set B level1/level2: kernels + collectives rebuilt into each rank's step vs
step_trace_time).

    .venv/bin/python bench/bench_predict.py [--results DIR] [--reuse] [--json] [--save-hardware FILE]

--reuse: use the runs already in DIR (from an earlier invocation) instead of sweeping again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "bench" / "predict" / "ws1.yaml", ROOT / "bench" / "predict" / "ws2.yaml"]
#: (world_size, comm_fusion, grad_compression, micro_batches) of the runs the model is fitted on
FIT = {
    (1, "0", "none", 1),
    (1, "0", "none", 2),
    (2, "0", "none", 1),
    (2, "all", "none", 1),
    (2, "0", "fp16", 1),
    (2, "0", "none", 2),
    (2, "all", "none", 2),
    (2, "0", "fp16", 2),
}
REPLAY = [
    ("Ascend__msinsight", "test", "data", "pytorch", "text", "level1"),
    ("Ascend__msinsight", "test", "data", "pytorch", "text", "level2"),
]


def key(rec: dict) -> tuple:
    from perfbench.predict.observe import settings_of

    s = settings_of(rec)
    return (s["world_size"], str(s["comm_fusion"]), s["grad_compression"], s["micro_batches"])


def validate(store, fit_recs, held, quantile, measure):
    from perfbench.predict.fit import fit
    from perfbench.predict.model import predict
    from perfbench.predict.observe import observe

    cal = fit([observe(store, r, quantile, measure) for r in fit_recs])
    rows = []
    for r in sorted(held, key=key):
        o = observe(store, r, quantile, measure)
        p = predict(cal, o.settings)
        rows.append(
            {
                "run": r["run_id"],
                "settings": dict(zip(("world_size", "comm_fusion", "grad_compression", "micro_batches"), key(r))),
                "measured_s": o.step_time_s,
                "predicted_s": p["step_time_s"],
                "interval": [p["interval"]["low"], p["interval"]["high"]],
                "error": p["step_time_s"] / o.step_time_s - 1,
                "step_noise": o.noise,
            }
        )
    return cal, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "bench" / "out" / "predict-results"))
    ap.add_argument("--reuse", action="store_true", help="use the runs already in --results")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save-hardware", help="write the fitted machine profile (YAML) here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from perfbench.predict.replay import replay_path
    from perfbench.store import Store

    sweep_s = None
    if not args.reuse:
        t0 = time.time()
        for cfg in CONFIGS:
            r = subprocess.run(
                [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", args.results],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                print(r.stdout[-2000:], r.stderr[-3000:], file=sys.stderr)
                return 1
        sweep_s = time.time() - t0
    store = Store(args.results, create=False)
    runs = [r for r in store.list_runs() if r.get("status") == "ok" and r.get("sweep_id", "").startswith("predict-ws")]
    latest: dict[tuple, dict] = {}
    for r in sorted(runs, key=lambda r: r["run_id"]):  # the newest run of each setting
        latest[key(r)] = r
    fit_recs = [r for k, r in latest.items() if k in FIT]
    held = [r for k, r in latest.items() if k not in FIT]
    if len(fit_recs) != len(FIT) or not held:
        print(f"missing runs: have {sorted(latest)}", file=sys.stderr)
        return 1
    out = {"sweep_wall_s": sweep_s, "fit": [r["run_id"] for r in fit_recs]}
    for label, q, measure in (("median", None, "wall"), ("p25", 0.25, "wall"), ("cpu", None, "cpu")):
        cal, rows = validate(store, fit_recs, held, q, measure)
        errs = [abs(x["error"]) for x in rows]
        inside = sum(x["interval"][0] <= x["measured_s"] <= x["interval"][1] for x in rows)
        out[label] = {
            "held_out": rows,
            "median_abs_error": statistics.median(errs),
            "worst_abs_error": max(errs),
            "within_interval": f"{inside}/{len(rows)}",
            "calibration": {
                "residual": cal.residual,
                "noise": cal.noise,
                "base_ref_s": cal.base_ref_s,
                "per_microbatch_s": cal.per_microbatch_s,
                "contention": cal.machine.contention,
                "link": vars(cal.machine.links[0]),
                "compression_s_per_byte": cal.compression_s_per_byte,
            },
        }
        if label == "median":
            main_cal = cal
    cal = main_cal
    if args.save_hardware:
        from perfbench.predict.hardware import save

        cal.machine.name = "cpu-2core"
        cal.machine.notes = [
            f"fitted by bench/bench_predict.py from {len(fit_recs)} runs on this 2-core VM, "
            f"{time.strftime('%Y-%m-%d')}: " + ", ".join(r["run_id"] for r in fit_recs)
        ]
        save(cal.machine, args.save_hardware)
    replay = []
    fixtures = ROOT.parent / "shared" / "fixtures" / "ascend"
    for parts in REPLAY:
        for x in replay_path(str(fixtures.joinpath(*parts))):
            replay.append(dict(x, set="/".join(parts[-2:])))
    out["replay"] = replay
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    if sweep_s:
        print(f"sweeps: {sweep_s:.0f} s wall")
    print("fit on: " + ", ".join(r["run_id"].split("-", 5)[-1] for r in fit_recs))
    for label in ("median", "p25", "cpu"):
        res = out[label]
        print(
            {
                "median": "step time = median of the measured steps (the catalogue's step_time_s)",
                "p25": "step time = 25th percentile of the measured steps (less sensitive to machine load)",
                "cpu": "CPU time per step (the catalogue's step_cpu_s: what a busy machine stretches far less)",
            }[label]
        )
        print(f"{'held-out run':<34}{'measured ms':>12}{'predicted ms':>13}{'interval ms':>16}{'error':>9}{'noise':>8}")
        for x in res["held_out"]:
            print(
                f"{x['run'].split('-', 5)[-1]:<34}{x['measured_s'] * 1e3:>12.1f}{x['predicted_s'] * 1e3:>13.1f}"
                f"{x['interval'][0] * 1e3:>8.0f}-{x['interval'][1] * 1e3:<7.0f}"
                f"{x['error']:>+9.1%}{x['step_noise']:>8.1%}"
            )
        print(
            f"median |error| {res['median_abs_error']:.1%}, worst {res['worst_abs_error']:.1%}, "
            f"measured inside the interval {res['within_interval']}\n"
        )
    print(
        f"{'replay (Ascend)':<18}{'rank':>5}{'measured ms':>12}{'replay ms':>10}{'error':>8}"
        f"{'kernels+comm':>14}{'error':>8}"
        f"{'modelled comm':>15}{'error':>8}"
    )
    for x in replay:
        print(
            f"{x['set']:<18}{x['rank']:>5}{x['measured_s'] * 1e3:>12.2f}{x['replay_s'] * 1e3:>10.2f}"
            f"{x['replay_error']:>+8.1%}"
            f"{x['critical_path_s'] * 1e3:>14.2f}{x['critical_path_error']:>+8.1%}"
            f"{x['modelled_comm_s'] * 1e3:>15.2f}{x['modelled_comm_error']:>+8.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
