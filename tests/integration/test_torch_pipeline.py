"""The PyTorch reference workload in two pipeline stages (workloads/torch_ddp/pipeline.py, on
torch.distributed.pipelining over gloo), swept through `workload: script` and torchrun with an unbalanced split.

Expected values from outside the code: 1F1B (and GPipe) over M micro-batches sends each micro-batch's activations
forward and its gradient back once, so every rank of a 2-stage pipeline does M sends and M receives per step
(hand-counted from the schedule); one replica trains `batch_size` samples per step, counted once; the stage of
each rank comes from the trace's own process groups (`pg_config`, the group described "pp"); and with 2 of 18
layers on stage 0 (the stem and the first block against the rest), stage 1 is the bottleneck, which the advice
names first among the causes it has a setting for (on a loaded machine a preempted rank's idle time can make
`free_time`, which has none, as large: it may come before it)."""

from __future__ import annotations

import json

import pytest

from perfbench.store import Store
from tests.support import run_perfbench, torch_train_script, write_yaml

pytestmark = pytest.mark.msrun

M = 4
BATCH = 16


def test_unbalanced_pipeline_sends_each_micro_batch_and_the_stage_imbalance_comes_first(tmp_path):
    cfg = {
        "name": "torchpp",
        "workload": "script",
        "script": torch_train_script(),
        "knobs": {"width": 16, "image_size": 32, "num_classes": 10},
        "train": {"batch_size": BATCH, "steps": 8, "warmup_steps": 2},
        "profile": {"steps": 3},
        "parallel": {"pipeline_stages": 2, "micro_batches": M, "pipeline_split": [2, 16]},
        "sweep": {"world_size": [2]},
        "launch": {"timeout_s": 300},
    }
    results = tmp_path / "results"
    r = run_perfbench("sweep", write_yaml(tmp_path / "pp.yaml", cfg), "--results", results, check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(results)
    ((rid,),) = [s["runs"] for s in store.list_sweeps()]
    run = store.read_run(rid)
    assert run["status"] == "ok", run

    stages = store.read_table(rid, "rank_stages")
    assert dict(zip(stages["rank"], stages["stage"])) == {0: 0, 1: 1}
    assert set(stages["stage_source"]) == {"pp groups"}

    comm = store.read_table(rid, "comm_ops")
    per = comm.groupby(["rank", "step", "kernel"]).size().unstack(fill_value=0)
    assert set(per.columns) == {"gloo:send", "gloo:recv"}
    assert (per["gloo:send"] == M).all() and (per["gloo:recv"] == M).all(), per
    assert len(per) == 2 * 3  # 2 ranks x 3 profiled steps

    ws = store.read_table(rid, "workload_steps")
    assert (ws.groupby("step")["samples"].sum() == BATCH).all()  # the last stage counts, once per step

    doc = json.loads(run_perfbench("advise", rid, "--results", results, "--json").stdout)
    roots = [a for a in doc["advice"] if a.get("symptom_of") is None]
    knobbed = [a for a in roots if a.get("try")]
    assert knobbed[0]["rule"] == "stage_imbalance" and knobbed[0]["stage"] == 1, [a["id"] for a in roots]
    assert json.loads(knobbed[0]["try"]) == {"parallel.pipeline_split": None}
    assert "stage_imbalance:1" in [a["id"] for a in roots[:2]], [a["id"] for a in roots]
    # the lateness between the stages is the imbalance's symptom, not a slow rank of its own
    assert all(a["symptom_of"] for a in doc["advice"] if a["rule"] == "slow_rank")
