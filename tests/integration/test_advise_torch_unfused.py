"""The PyTorch reference job (workloads/torch_ddp/train.py) unfused: 2 ranks under torchrun, DDP over gloo with
`parallel.comm_fusion: 0` (DDP `bucket_cap_mb` 0: one all-reduce per parameter), a small ResNet-50 (width 8).

- The fresh Kineto traces size every collective: per rank and profiled step, the all-reduces' byte sizes are the
  model's parameter sizes x 4 (fp32 gradients), counted here from the model itself (161 parameters, 1,506,888 bytes),
  in group "0" of size 2 (the job's one process group).
- The top root of the stored advice is `small_packets`, which tries `parallel.comm_fusion: all`, and the root gains
  add to no more than the step.

The top finding is the first root of the stored ranked advice (analyzers/analyses/advice/)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from perfbench.store import Store
from tests.support import run_perfbench, torch_train_script, write_yaml

pytestmark = pytest.mark.msrun

WIDTH = 8
CFG = {
    "name": "torch-unfused",
    "workload": "script",
    "script": torch_train_script(),
    "knobs": {"width": WIDTH, "image_size": 32, "num_classes": 10},
    "train": {"batch_size": 4, "steps": 6, "warmup_steps": 2},
    "profile": {"steps": 2},
    "parallel": {"comm_fusion": 0, "overlap_grad_comm": True},
    "sweep": {"world_size": [2]},
    "launch": {"timeout_s": 300, "stall_timeout_s": 120},
}


@pytest.fixture(scope="module")
def unfused(tmp_path_factory):
    base = tmp_path_factory.mktemp("torch_unfused")
    results = base / "results"
    run_perfbench("sweep", write_yaml(base / "unfused.yaml", CFG), "--results", results, timeout=600)
    (rec,) = Store(results).list_runs()
    assert rec["status"] == "ok", rec.get("error")
    return results, rec


def test_every_allreduce_is_sized_from_the_fresh_trace(unfused):
    from workloads.torch_ddp.model import ResNet

    params = Counter(p.numel() * 4 for p in ResNet(width=WIDTH, num_classes=10).parameters())
    assert sum(params.values()) == 161 and sum(k * v for k, v in params.items()) == 1506888
    results, rec = unfused
    co = Store(results).read_table(rec["run_id"], "comm_ops")
    assert set(co["kernel"]) == {"gloo:all_reduce"} and set(co["group"]) == {"0"} and set(co["group_size"]) == {2}
    per = co.groupby(["rank", "step"])
    assert len(per) == 2 * CFG["profile"]["steps"]
    for key, g in per:
        assert Counter(g["size_bytes"].astype(int)) == params, key
    assert rec["metrics"]["comm_bytes_per_step"] == 1506888


def test_small_packets_is_the_top_finding(unfused):
    results, rec = unfused
    adv = Store(results).read_table(rec["run_id"], "advice")
    roots = adv[adv["symptom_of"].isna()]
    top = roots.iloc[0]
    assert top["rule"] == "small_packets", roots[["id", "gain_ms", "basis"]].to_string()
    assert json.loads(top["try"]) == {"parallel.comm_fusion": "all"} and top["gain_ms"] > 0
    gains = roots["gain_ms"].dropna()
    assert (gains >= 0).all() and gains.sum() <= rec["metrics"]["step_time_s"] * 1000.0 + 1e-6
