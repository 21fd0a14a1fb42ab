"""Validation of `perfbench predict --memory`: fit on some runs of the memory sweep, predict the held-out settings.

Runs examples/memory.yaml (full-width ResNet-50, AdamW, 2 ranks, zero_stage 0/1/2 x recompute false/true) into a
results folder (or reuses the runs already there), then for each zero stage in turn fits the memory model on the
runs of the *other* stages (both recompute settings) and predicts the held-out stage's runs: the model-state
formula is what carries the prediction across stages. Reports measured and predicted peak per held-out run, the
error, the median and the worst, and the measured table (peak per rank, step time) for docs/benchmarks.md.

    .venv/bin/python bench/bench_predict_memory.py [--results DIR] [--reuse] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "memory.yaml"


def _runs(store) -> list[dict]:
    sweeps = sorted(
        (s for s in store.list_sweeps() if str(s.get("sweep_id", "")).startswith("memory-")),
        key=lambda s: s["sweep_id"],
    )
    if not sweeps:
        sys.exit(f"no memory sweep in {store.root}: run without --reuse")
    return [r for r in store.list_runs(sweep=sweeps[-1]["sweep_id"]) if r.get("status") == "ok"]


def _rank_peaks_mb(store, run_id: str) -> list[float]:
    """Each rank's peak resident MB, from the run's `memory` table (rank order)."""
    import pandas as pd

    path = store.run_dir(run_id) / "tables" / "memory.parquet"
    if not path.exists():
        return []
    m = pd.read_parquet(path).sort_values("rank")
    return [float(v) / 2**20 for v in m["peak_rss_bytes"]]


def ordering(measured: list[dict]) -> list[tuple[str, bool]]:
    """The expected ordering of the largest rank's peaks, one comparison a line: at each recompute setting
    stage 0 > stage 1 >= stage 2; at each stage recompute below no recompute."""
    peak = {(m["zero_stage"], m["recompute"]): m["peak_mb"] for m in measured}
    out = []
    for rc in (False, True):
        for a, b, strict in ((0, 1, True), (1, 2, False)):
            if (a, rc) in peak and (b, rc) in peak:
                x, y = peak[a, rc], peak[b, rc]
                ok = x > y if strict else x >= y
                sign = ">" if strict else ">="
                out.append((f"recompute={str(rc).lower()}: stage {a} {x:.0f} {sign} stage {b} {y:.0f} MB", ok))
    for z in (0, 1, 2):
        if (z, False) in peak and (z, True) in peak:
            x, y = peak[z, True], peak[z, False]
            out.append((f"stage {z}: recompute {x:.0f} < no recompute {y:.0f} MB", x < y))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "bench-results" / "memory"))
    ap.add_argument("--reuse", action="store_true", help="use the runs already in --results")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not args.reuse:
        subprocess.run(
            [sys.executable, "-m", "perfbench", "sweep", str(CONFIG), "--results", args.results], check=True, cwd=ROOT
        )
    from perfbench.predict.memory import fit_memory, memory_settings, observe_memory, predict_memory
    from perfbench.store import Store

    store = Store(args.results, create=False)
    recs = _runs(store)
    obs = {r["run_id"]: observe_memory(store, r) for r in recs}
    measured = []
    for r in recs:
        cfg = r["config"]
        o, base = obs[r["run_id"]]
        measured.append(
            {
                "run_id": r["run_id"],
                "zero_stage": o.zero_stage,
                "recompute": o.recompute,
                "peak_mb": o.peak_bytes / 2**20,
                "step_time_s": (r.get("metrics") or {}).get("step_time_s"),
                "baseline_mb": base / 2**20 if base else None,
                "params": o.params,
                "world_size": cfg["world_size"],
                "rank_peaks_mb": _rank_peaks_mb(store, r["run_id"]),
            }
        )
    rows = []
    for held in sorted({o.zero_stage for o, _ in obs.values()}):
        fit = [(o, b) for o, b in obs.values() if o.zero_stage != held]
        bases = sorted(b for _, b in fit if b)
        cal = fit_memory([o for o, _ in fit], statistics.median(bases) if bases else None)
        for r in recs:
            o, _ = obs[r["run_id"]]
            if o.zero_stage != held:
                continue
            p = predict_memory(cal, memory_settings(r["config"], o.params))
            rows.append(
                {
                    "run_id": r["run_id"],
                    "zero_stage": held,
                    "recompute": o.recompute,
                    "fitted_on": len(fit),
                    "measured_mb": o.peak_bytes / 2**20,
                    "predicted_mb": p["peak_bytes"] / 2**20,
                    "error": p["peak_bytes"] / o.peak_bytes - 1,
                    "interval_mb": [p["interval"]["low"] / 2**20, p["interval"]["high"] / 2**20],
                }
            )
    errs = [abs(r["error"]) for r in rows]
    order = ordering(measured)
    out = {
        "measured": measured,
        "ordering": [{"comparison": c, "holds": ok} for c, ok in order],
        "held_out": rows,
        "median_abs_error": statistics.median(errs) if errs else None,
        "worst_abs_error": max(errs) if errs else None,
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print("| zero_stage | recompute | peak MB (largest rank) | rank 0 / rank 1 MB | step s | baseline MB |")
    print("|---|---|---|---|---|---|")
    for m in sorted(measured, key=lambda m: (m["zero_stage"], m["recompute"])):
        ranks = " / ".join(f"{v:.0f}" for v in m["rank_peaks_mb"]) or "-"
        base = f"{m['baseline_mb']:.0f}" if m["baseline_mb"] else "-"
        print(
            f"| {m['zero_stage']} | {str(m['recompute']).lower()} | {m['peak_mb']:.0f} | {ranks} | "
            f"{m['step_time_s']:.1f} | {base} |"
        )
    print()
    for c, ok in order:
        print(f"{'holds' if ok else 'DOES NOT HOLD'}: {c}")
    print()
    print("| held-out zero_stage | recompute | fitted on | measured MB | predicted MB | error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['zero_stage']} | {str(r['recompute']).lower()} | {r['fitted_on']} runs | {r['measured_mb']:.0f} | "
            f"{r['predicted_mb']:.0f} | {r['error']:+.1%} |"
        )
    print(f"\nmedian |error| {out['median_abs_error']:.1%}, worst {out['worst_abs_error']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
