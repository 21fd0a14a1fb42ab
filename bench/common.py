"""What several benches share: the run config of the quickstart's model (ResNet-50 3-4-6-3, 32x32, batch 8,
GRAPH mode, synthetic data), for benches that launch it (bench_profiler_overhead.py) or drive it in-process
(bench_profiler_interleaved.py, bench_memory_sampling.py)."""

from __future__ import annotations

from pathlib import Path


def quickstart_config(run_id: str, output_dir: Path, width: int, level: str, **top) -> dict:
    """The run_config.json of the quickstart model with the profiler off at `level` (profile.steps 0), one rank,
    no faults injected; `top` replaces top-level keys (world_size, inject, ...)."""
    return {
        "run_id": run_id,
        "workload": "resnet50",
        "world_size": 1,
        "repeat": 0,
        "output_dir": str(output_dir),
        "model": {"image_size": 32, "num_classes": 10, "width": width, "layers": [3, 4, 6, 3]},
        "train": {
            "batch_size": 8,
            "steps": 10**6,
            "warmup_steps": 3,
            "seed": 0,
            "lr": 0.05,
            "momentum": 0.9,
            "mode": "graph",
            "data": "synthetic",
        },
        "profile": {"enabled": False, "steps": 0, "level": level},
        "parallel": {
            "grad_compression": "none",
            "compression_ratio": 0.01,
            "comm_fusion": 0,
            "fusion_impl": "perfbench",
            "pipeline_stages": 1,
            "micro_batches": 1,
            "pipeline_schedule": "1f1b",
        },
        "inject": {},
    } | top
