"""`tensor_parallel_comm`'s gain: the exposed tensor-parallel time less the collectives halving the tensor-parallel
size adds (analyzers/analyses/advice/tensor_parallel_comm.py), against hand-computed values.

Measured 2026-11-27 (docs/advice.md, "Tensor parallel too high"): the MoE at 2 ranks with tensor_parallel 2 exposed
~131 ms of tensor-parallel all-reduce per step, and tensor_parallel 1 with half the batch was slower, not faster:
its step carried 36 collectives per rank (24 unfused data-parallel gradient all-reduces, 12 expert dispatch /
combine) in place of the 12 tensor-parallel ones."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analyzers.analyses import advice as A
from analyzers.analyses.advice import tensor_parallel_comm as TP

#: ranks 0 and 1 expose 30 and 50 ms of tensor-parallel all-reduce in a 100 ms step: 40 ms per rank and step
EX = pd.DataFrame(
    {"rank": [0, 1], "step": [1, 1], "comm_class": ["tensor_parallel"] * 2, "time_us": [0.0] * 2,
     "exposed_us": [30_000.0, 50_000.0]}
)  # fmt: skip
STEPS = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [100_000.0] * 2})
#: the calibration case's MoE (bench/bench_advice_calibration.py CASES["tensor_parallel"], the model's defaults)
MODEL = {"num_layers": 2, "num_experts": 2, "top_k": 2, "hidden_size": 64, "seq_len": 32, "capacity_factor": 1.25}


def _ops(per_rank_step: int) -> pd.DataFrame:
    """`per_rank_step` ApplyMomentum ops (one per parameter tensor) and one MatMul on each of 2 ranks, 1 step."""
    rows = [
        {"rank": r, "step": 1, "type": t, "core_type": "CPU"}
        for r in (0, 1)
        for t in ["ApplyMomentum"] * per_rank_step + ["MatMul"]
    ]
    return pd.DataFrame(rows)


def _cfg(world=2, T=2, batch=4, **par):
    return {
        "workload": "moe",
        "world_size": world,
        "model": dict(MODEL),
        "train": {"batch_size": batch},
        "parallel": {"tensor_parallel": T, "pipeline_stages": 1, "micro_batches": 1, "comm_fusion": 0, **par},
    }


def _tp_row(cfg, ops=None):
    tables = {"comm_exposure_classes": EX, "steps": STEPS, A.CONFIG_KEY: cfg}
    if ops is not None:
        tables["ops_for_checks"] = ops
    out = A.advise(tables, {"step_time_s": 0.1})
    return out.set_index("rule").loc["tensor_parallel_comm"]


def test_halving_tp_from_one_replica_adds_more_collectives_than_it_removes():
    # 2 ranks, T = 2 -> D = 1; the fix T = 1, B = 2 -> D = 2.
    # Tensor-parallel all-reduces now: 2 per micro-batch and block (moe_tp_comm_per_microbatch) x 3 (forward,
    # re-materialized forward, backward) x 2 blocks x 1 micro-batch = 12 per step; 40 ms exposed -> 40/12 = 3.333 ms
    # each. The fix adds: expert dispatch + combine, 2 calls x 3 x 2 blocks x 1 = 12; the replicas' gradient
    # all-reduce unfused (comm_fusion 0): 32 parameter tensors (32 ApplyMomentum per rank and step) less the experts'
    # 4 per block x 2 blocks = 8 -> 24. Added 36 -> gain = 40 x (1 - 36/12) = -80 ms: not positive, so no knob and
    # gain 0 (the measured fix was 168-387 ms slower on a ~131 ms exposed time; docs/advice.md)
    assert TP.tp_collectives(_cfg(), 2, 4) == 12
    added = TP.added_collectives({"ops_for_checks": _ops(32)}, _cfg(), 2, 2)
    assert added == (36, {"expert_dispatch": 12, "dp_grad": 24})
    assert TP.net_gain(40.0, 12, added) == pytest.approx(-80.0)
    row = _tp_row(_cfg(), _ops(32))
    assert row["gain_ms"] == 0.0 and row["try"] is None
    assert "would not pay" in row["message"] and "adds 36 collectives" in row["evidence"]
    assert "net -80.00 ms" in row["evidence"]


def test_one_flat_gradient_buffer_adds_one_collective():
    # comm_fusion `all`: the replicas' gradients in one buffer, 1 all-reduce; expert dispatch 12 as above: added 13
    # -> 40 x (1 - 13/12) = -3.333 ms; still not positive. The tensor count is then not needed.
    added = TP.added_collectives({}, _cfg(comm_fusion="all"), 2, 2)
    assert added == (13, {"expert_dispatch": 12, "dp_grad": 1})
    assert TP.net_gain(40.0, 12, added) == pytest.approx(40.0 * (1 - 13 / 12))


def test_already_data_parallel_adds_nothing_and_keeps_the_knob():
    # 4 ranks, T = 2 -> D = 2 already: the fix (T = 1, D = 4) issues the same gradient and expert collectives (larger),
    # no more: gain = the exposed 40 ms, predicted step 100 - 40 = 60 ms, the knob kept
    assert TP.added_collectives({}, _cfg(world=4), 2, 2) == (0, {})
    row = _tp_row(_cfg(world=4))
    assert row["gain_ms"] == pytest.approx(40.0) and row["predicted_step_ms"] == pytest.approx(60.0)
    assert json.loads(row["try"]) == {"parallel.tensor_parallel": 1, "train.batch_size": 2}


def test_what_the_knob_adds_unknown_is_a_null_gain_not_a_guess():
    # D = 1 and comm_fusion 0, but no optimizer ops in the tables: the gradient all-reduces' count is unknown, so is
    # the gain (null, never 0); the knob stays (trying it is how to know). The same without the world size.
    assert TP.added_collectives({}, _cfg(), 2, 2) is None
    row = _tp_row(_cfg())
    assert pd.isna(row["gain_ms"]) and row["basis"].startswith("unknown")
    assert json.loads(row["try"]) == {"parallel.tensor_parallel": 1, "train.batch_size": 2}
    no_world = {k: v for k, v in _cfg().items() if k != "world_size"}
    assert TP.added_collectives({"ops_for_checks": _ops(32)}, no_world, 2, 2) is None


def test_pipeline_layout_reduces_gradients_in_one_buffer():
    # 4 ranks, 2 stages, T = 2 -> D = 1; fix T = 1 -> D = 2. Busiest stage: stage_bounds over costs [0.25, 1, 1, 0.5]
    # in 2 stages holds 1 of the 2 blocks; 2 micro-batches. Tensor-parallel all-reduces: 2 x 3 x 1 block x 2 = 12;
    # added: expert dispatch 2 x 3 x 1 x 2 = 12 and one flat gradient all-reduce per stage group (S > 1) = 13
    cfg = _cfg(world=4, pipeline_stages=2, micro_batches=2)
    assert TP.tp_collectives(cfg, 2, 4) == 12
    assert TP.added_collectives({}, cfg, 2, 2) == (13, {"expert_dispatch": 12, "dp_grad": 1})


def test_without_the_run_config_the_gain_is_the_exposed_time_and_no_knob():
    # imported profiles (no run config): no knob to try, the exposed time as an upper bound (as before)
    row = _tp_row({})
    assert row["gain_ms"] == pytest.approx(40.0) and row["try"] is None
    assert row["basis"].startswith("upper bound")


def test_a_tensor_parallel_run_is_offered_no_gradient_knob_for_its_activation_collectives():
    # _small(): 16 sub-MiB all-reduces per rank and step, which small_packets finds (fuse them: comm_fusion). Marked
    # tensor_parallel (activations, Megatron's f / g) there is nothing comm_fusion can fuse: no finding.
    # exposed_communication on a tensor_parallel=2 run keeps its finding but offers no fp16 compression (the
    # workload refuses grad_compression with tensor parallel)
    from tests.unit.test_advice_gains import _sb, _small

    co = _small()
    sb = _sb(1000.0, 0.0, ranks=(0, 1), step_us=4000.0)  # 1 ms exposed of a 4 ms step: 25% (> 20%, a finding)
    base = A.advise({"comm_ops": co, "step_breakdown": sb}, {"step_time_s": 0.004})
    assert "small_packets" in set(base["rule"])
    tp_co = co.assign(comm_class="tensor_parallel")
    out = A.advise({"comm_ops": tp_co, "step_breakdown": sb}, {"step_time_s": 0.004})
    assert "small_packets" not in set(out["rule"])
    cfg = {"parallel": {"tensor_parallel": 2}}
    ec = A.advise({"comm_ops": co, "step_breakdown": sb, A.CONFIG_KEY: cfg}, {"step_time_s": 0.004})
    row = ec.set_index("rule").loc["exposed_communication"]
    assert pd.isna(row["try"])
    assert json.loads(base.set_index("rule").loc["exposed_communication", "try"]) == {
        "parallel.grad_compression": "fp16"
    }
