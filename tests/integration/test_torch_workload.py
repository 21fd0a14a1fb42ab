"""The PyTorch reference workload (workloads/torch_ddp/train.py) swept through `workload: script` and torchrun:
2 ranks of ResNet-50 (width 16) under DDP with gloo, checked against what DDP does with the model's parameters.

Expected values come from outside the code under test: the bucket count is hand-counted here from the model's
parameter sizes by DDP's rule (torch 2.13, `bucket_cap_mb` given: the buckets are rebuilt after the first step in
gradient-ready order, parameters in reverse, a bucket closes once it holds `bucket_cap_mb`, and the first bucket
has the same cap since `first_bucket_bytes_cap` is the default 1 MB only when `bucket_cap_mb` is not given);
at 0.5 MB DDP's own logging (`_get_ddp_logging_data()["rebuilt_bucket_sizes"]`) lists 10 buckets."""

from __future__ import annotations

import pytest

from perfbench.store import Store
from tests.support import run_perfbench, torch_train_script, write_yaml

pytestmark = pytest.mark.msrun

CAP_MB = 0.5


def hand_counted_buckets(cap_mb: float) -> int:
    from workloads.torch_ddp.model import ResNet

    sizes = [p.numel() * 4 for p in ResNet(width=16, num_classes=10).parameters()]  # fp32 gradients
    count, held = 0, 0
    for b in reversed(sizes):
        held += b
        if held >= cap_mb * (1 << 20):
            count, held = count + 1, 0
    return count + (1 if held else 0)


def test_ddp_buckets_are_the_collectives_and_overlap_shows_in_the_breakdown(tmp_path):
    cfg = {
        "name": "torchwl",
        "workload": "script",
        "script": torch_train_script(),
        "knobs": {"width": 16, "image_size": 32, "num_classes": 10},
        "train": {"batch_size": 8, "steps": 8, "warmup_steps": 2},
        "profile": {"steps": 3},
        "parallel": {"comm_fusion": CAP_MB},
        "sweep": {"world_size": [2], "overlap_grad_comm": [True, False]},
        "launch": {"timeout_s": 300},
    }
    path = write_yaml(tmp_path / "torchwl.yaml", cfg)
    results = tmp_path / "results"
    r = run_perfbench("sweep", path, "--results", results, check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(results)
    (sw,) = store.list_sweeps()
    runs = {}
    for rid in sw["runs"]:
        run = store.read_run(rid)
        assert run["status"] == "ok", run
        runs[run["config"]["parallel"]["overlap_grad_comm"]] = run

    expected = hand_counted_buckets(CAP_MB)
    assert expected == 10  # DDP's own rebuilt_bucket_sizes at 0.5 MB for this model
    for run in runs.values():  # overlapped (DDP) or after backward (the script's buckets): the same buckets
        assert run["metrics"]["collectives_per_step"] == expected
        comm = store.read_table(run["run_id"], "comm_ops")
        assert set(comm["kernel"]) == {"gloo:all_reduce"}
        assert (comm.groupby(["rank", "step"]).size() == expected).all()

    def overlapped_ms(run: dict) -> float:
        b = store.read_table(run["run_id"], "step_breakdown")
        assert len(b) == 2 * 3  # 2 ranks x the 3 profiled steps
        return float(b["overlapped_us"].sum()) / 1000.0 / len(b)

    on, off = overlapped_ms(runs[True]), overlapped_ms(runs[False])
    assert on > 1.0, on  # DDP all-reduces a bucket while backward computes the next (gloo's own threads)
    assert off < 0.05 * on, (on, off)
