"""The PyTorch reference workload's parallel knobs and an injected straggler, swept through `workload: script` and
torchrun (2 ranks of ResNet-50 width 16 over gloo), checked against hand counts and the profiler's own trace.

- `micro_batches: 2` (DDP `no_sync()` on the first micro-batch), `zero_stage: 1` (ZeroRedundancyOptimizer with
  its parameters as one bucket view per rank) and `train.recompute` (checkpointed bottleneck blocks) in one run:
  per rank and profiled step the stored collectives are DDP's 10 buckets at 0.5 MB once (not once per
  micro-batch: hand count in test_torch_workload.py) plus one `gloo:broadcast` per rank (each rank broadcasts
  its updated share after `step()`); the step's samples are the batch, 8 (2 micro-batches of 4); and the
  PyTorch profiler's own trace holds, per `ProfilerStep#N`, 2 x (53 + 52) `aten::conv2d`: each micro-batch's
  forward runs the 53 convolutions (stem 1, 16 blocks x 3, 4 projection shortcuts), and backward runs the
  52 inside the checkpointed blocks once more.
- `inject.straggler_rank: 1` with `straggler_busy_ms`: `perfbench advise RUN --json`'s first root finding is
  the straggler, rank 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfbench.store import Store
from tests.support import run_perfbench, torch_train_script, write_yaml

pytestmark = pytest.mark.msrun

BATCH = 8
BUCKETS = 10  # DDP's buckets of this model at 0.5 MB (test_torch_workload.py counts them by hand)
WORLD = 2
FORWARD_CONVS = 1 + 16 * 3 + 4  # stem, three per bottleneck block, the four projection shortcuts
BLOCK_CONVS = 16 * 3 + 4  # what the checkpointed blocks run again in backward
BUSY_MS = 300.0


def _sweep(tmp: Path, name: str, **over) -> tuple[Store, dict]:
    cfg = {
        "name": name,
        "workload": "script",
        "script": torch_train_script(),
        "knobs": {"width": 16, "image_size": 32, "num_classes": 10},
        "train": {"batch_size": BATCH, "steps": 6, "warmup_steps": 2},
        "profile": {"steps": 2},
        "parallel": {"comm_fusion": 0.5, "overlap_grad_comm": True},
        "sweep": {"world_size": [WORLD]},
        "launch": {"timeout_s": 300},
    }
    for k, v in over.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    results = tmp / "results"
    r = run_perfbench("sweep", write_yaml(tmp / f"{name}.yaml", cfg), "--results", results, check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(results)
    (rec,) = store.list_runs()
    assert rec["status"] == "ok", rec.get("error")
    return store, rec


def test_micro_batches_zero1_and_recompute(tmp_path):
    store, rec = _sweep(
        tmp_path,
        "torchpar",
        train={"recompute": True},
        parallel={"micro_batches": 2, "zero_stage": 1},
    )
    rid = rec["run_id"]
    comm = store.read_table(rid, "comm_ops")
    per_step = comm.groupby(["rank", "step", "kernel"]).size().unstack("kernel")
    assert len(per_step) == WORLD * 2  # 2 ranks x 2 profiled steps
    assert (per_step["gloo:all_reduce"] == BUCKETS).all(), per_step  # no_sync: the buckets once per step
    assert (per_step["gloo:broadcast"] == WORLD).all(), per_step  # ZeRO-1: each rank's share, once
    assert store.read_run(rid)["metrics"]["collectives_per_step"] == BUCKETS + WORLD

    steps = store.read_table(rid, "workload_steps")
    assert (steps["samples"] == BATCH).all(), steps[["rank", "step", "samples"]]

    traces = sorted((store.artifacts_dir(rid) / "profile").glob("rank*.pt.trace.json"))
    assert len(traces) == WORLD
    for path in traces:
        events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
        windows = [e for e in events if e["name"].startswith("ProfilerStep#")]
        assert len(windows) == 2
        for w in windows:
            convs = [
                e
                for e in events
                if e["name"] == "aten::conv2d" and w["ts"] <= e["ts"] < w["ts"] + w["dur"] and e["tid"] == w["tid"]
            ]
            assert len(convs) == 2 * (FORWARD_CONVS + BLOCK_CONVS), (path.name, w["name"], len(convs))


def test_the_advice_names_the_injected_straggler_first(tmp_path):
    store, rec = _sweep(tmp_path, "torchstrag", inject={"straggler_rank": 1, "straggler_busy_ms": BUSY_MS})
    steps = store.read_table(rec["run_id"], "workload_steps")
    cpu_ms = steps[steps["step"] >= 2].groupby("rank")["cpu_s"].median() * 1000
    assert cpu_ms[1] - cpu_ms[0] >= 0.8 * BUSY_MS, dict(cpu_ms)  # rank 1 alone burned it
    # gloo's annotations name no group; the trace's pg_config holds one, the default ("0", 2 ranks)
    comm = store.read_table(rec["run_id"], "comm_ops")
    assert set(comm["group"]) == {"0"} and set(comm["group_size"]) == {2}

    r = run_perfbench("advise", rec["run_id"], "--results", store.root, "--json")
    rows = json.loads(r.stdout)["advice"]
    roots = [row for row in rows if not row.get("symptom_of")]
    assert roots, rows
    first = roots[0]
    ranks = json.loads(first["ranks"]) if isinstance(first["ranks"], str) else first["ranks"]
    assert first["rule"] == "slow_rank" and list(ranks) == [1], first
