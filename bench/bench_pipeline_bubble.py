"""Measured pipeline bubble vs the ideal (S-1)/(M+S-1): the MoE LM on 2 stages (2 ranks), GPipe and 1F1B.

    .venv/bin/python bench/bench_pipeline_bubble.py [--micro-batches 2 4 8] [--steps 6] [--bind-core auto|false]
        [--out bench_pp.json]

Runs each configuration through the real launcher (msrun, one at a time), reads the spans and computes the
bubble per stage with ``analyzers.analyses.pipeline.pipeline_bubbles`` over the post-warm-up steps; prints medians
over steps, the ideal, and the ratio measured/ideal, plus the median step time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from analyzers.analyses.pipeline import ideal_bubble_fraction, pipeline_bubbles  # noqa: E402
from perfbench.run import launcher  # noqa: E402

MODEL = {
    "vocab_size": 64,
    "seq_len": 16,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 2,
    "num_experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
    "aux_loss_coef": 0.01,
}


def run_one(out: Path, schedule: str, M: int, steps: int, port: int, batch: int, bind="auto") -> dict:
    name = f"pp-{schedule}-m{M}"
    art = out / name / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    cfg = {
        "run_id": name,
        "workload": "moe",
        "world_size": 2,
        "repeat": 0,
        "output_dir": str(art),
        "threads_per_rank": 1,
        "model": MODEL,
        "train": {
            "batch_size": batch,
            "steps": steps,
            "warmup_steps": 1,
            "seed": 0,
            "lr": 0.05,
            "momentum": 0.9,
            "mode": "graph",
            "data": "synthetic",
        },
        "profile": {"enabled": False, "steps": 0},
        "parallel": {
            "grad_compression": "none",
            "compression_ratio": 0.01,
            "comm_fusion": 0,
            "fusion_impl": "perfbench",
            "pipeline_stages": 2,
            "micro_batches": M,
            "pipeline_schedule": schedule,
        },
        "inject": {"crash_rank": None, "crash_step": None, "hang_rank": None, "hang_step": None, "delay_ms": 0},
    }
    path = art / "run_config.json"
    path.write_text(json.dumps(cfg, indent=1))
    res = launcher.launch(path, cfg, {"master_port": port, "bind_core": bind, "timeout_s": 600, "stall_timeout_s": 300})
    if res.status != "ok":
        raise SystemExit(f"{name}: {res.reason}\n{res.log_tail}")
    rows = []
    for r in range(2):
        rows += [json.loads(x) for x in (art / "metrics" / f"rank{r}.spans.jsonl").read_text().splitlines()]
    spans = pd.DataFrame(rows)
    spans = spans[spans.step >= 1]
    table = pipeline_bubbles(None, spans, cfg)
    step_times = []
    for r in range(2):
        step_times += [
            json.loads(x)["step_time_s"] for x in (art / "metrics" / f"rank{r}.steps.jsonl").read_text().splitlines()
        ][1:]
    out_row = {
        "schedule": schedule,
        "M": M,
        "ideal": ideal_bubble_fraction(2, M),
        "step_time_s": statistics.median(step_times),
    }
    for st in (0, 1):
        out_row[f"stage{st}"] = float(table[table.stage == st].bubble_fraction.median())
        busy = table[table.stage == st].busy_us.median() / 1e6
        out_row[f"stage{st}_busy_s"] = float(busy)
    out_row["ratio_mean_vs_ideal"] = (out_row["stage0"] + out_row["stage1"]) / 2 / out_row["ideal"]
    return out_row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--schedules", nargs="+", default=["gpipe", "1f1b"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--bind-core",
        default="auto",
        choices=["auto", "false"],
        help="msrun --bind_core via the launcher ('auto' pins rank r to core r on this 2-core box)",
    )
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_pp_") as tmp:
        port = 29250
        for sch in a.schedules:
            for M in a.micro_batches:
                rows.append(
                    run_one(Path(tmp), sch, M, a.steps, port, a.batch, False if a.bind_core == "false" else "auto")
                )
                port += 1
                r = rows[-1]
                print(
                    f"{sch:6s} M={M}: bubble stage0 {r['stage0']:.3f} stage1 {r['stage1']:.3f} "
                    f"ideal {r['ideal']:.3f} mean/ideal {r['ratio_mean_vs_ideal']:.2f} "
                    f"busy s0 {r['stage0_busy_s']:.3f}s s1 {r['stage1_busy_s']:.3f}s step {r['step_time_s']:.3f}s",
                    flush=True,
                )
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
