"""The PyTorch MoE reference workload (workloads/torch_ddp/train_moe.py) swept through torchrun on 2 ranks over
gloo, experts replicated against expert parallel, checked against hand counts.

Hand count (2 MoE layers, `comm_fusion: all`: one DDP bucket): replicated, a step's only collective is the
bucket's all-reduce; expert parallel, each MoE layer sends its tokens to the experts' owners and back with one
`all_to_all_single` each in forward, and autograd runs the same two exchanges in backward: 2 layers x 4 = 8
`gloo:all_to_all` per step beside the one all-reduce. Both layouts train the same model on the same data (every
rank draws all the experts from the seed; an expert's gradient is divided by the world size like DDP's mean), so
each rank's last loss is the same in both runs (printed by the script to 4 decimals)."""

from __future__ import annotations

import re

import pytest

from perfbench.store import Store
from tests.support import ROOT, run_perfbench, write_yaml

pytestmark = pytest.mark.msrun

LAYERS = 2


def test_expert_parallel_all_to_alls_and_the_same_losses(tmp_path):
    cfg = {
        "name": "torchmoe",
        "workload": "script",
        "script": {
            "path": str(ROOT / "workloads" / "torch_ddp" / "train_moe.py"),
            "framework": "pytorch",
            "env": {"OMP_NUM_THREADS": "1"},
        },
        "knobs": {"num_layers": LAYERS, "num_experts": 4, "expert_parallel": False},
        "train": {"batch_size": 4, "steps": 5, "warmup_steps": 2},
        "profile": {"steps": 2},
        "parallel": {"comm_fusion": "all"},
        "sweep": {"world_size": [2], "knobs.expert_parallel": [False, True]},
        "launch": {"timeout_s": 300},
    }
    results = tmp_path / "results"
    r = run_perfbench("sweep", write_yaml(tmp_path / "moe.yaml", cfg), "--results", results, check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(results)
    losses = {}
    for rec in store.list_runs():
        assert rec["status"] == "ok", rec.get("error")
        run = store.read_run(rec["run_id"])
        ep = run["config"]["knobs"]["expert_parallel"]
        per_step = store.read_table(rec["run_id"], "comm_ops").groupby(["rank", "step", "kernel"]).size()
        per_step = per_step.unstack("kernel", fill_value=0)
        assert len(per_step) == 2 * 2  # 2 ranks x 2 profiled steps
        assert (per_step["gloo:all_reduce"] == 1).all(), per_step
        a2a = per_step["gloo:all_to_all"] if "gloo:all_to_all" in per_step else per_step["gloo:all_reduce"] * 0
        assert (a2a == (4 * LAYERS if ep else 0)).all(), per_step
        assert set(per_step.columns) <= {"gloo:all_reduce", "gloo:all_to_all"}, per_step
        assert run["metrics"]["collectives_per_step"] == 1 + (4 * LAYERS if ep else 0)
        logs = store.artifacts_dir(rec["run_id"]) / "logs"
        for rank in (0, 1):
            m = re.search(r"last loss (\d+\.\d+)", (logs / f"worker_{rank}.log").read_text())
            assert m, f"no loss line in worker_{rank}.log"
            losses[(ep, rank)] = m.group(1)
    assert losses[(True, 0)] == losses[(False, 0)] and losses[(True, 1)] == losses[(False, 1)], losses
