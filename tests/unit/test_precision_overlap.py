"""train.precision, dynamic loss scaling and parallel.overlap_grad_comm: config errors before launch, the
skipped-step metric, and what `perfbench predict` makes of both (fast, in process).

Expected messages are the rule a user reads, written out by hand; predicted numbers come from the textbook
ring formula (2(n-1) hops, 2(n-1)/n x bytes) and the overlap window, computed here."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzers.analyses.step_metrics import run_metrics, step_series
from perfbench.errors import UserError
from perfbench.predict.hardware import Hardware, Link
from perfbench.predict.model import predict
from tests.unit.test_config_rules import MOE, conf, error_of, ok
from tests.unit.test_predict import BW, LAT, MB, cal

# ---- config: errors name the key, the value and the reason, before anything launches ----------------------


def test_bf16_is_refused_on_the_cpu_backend_with_the_reason():
    msg = error_of(conf(train={"precision": "bf16"}))
    assert msg.startswith("train.precision: 'bf16' cannot run on the MindSpore CPU backend")
    assert "MatMul" in msg and "fp16" in msg


def test_bf16_as_a_sweep_axis_is_refused_too():
    msg = error_of(conf(sweep={"precision": ["fp32", "bf16"]}))
    assert "precision" in msg and "'bf16'" in msg and "CPU backend" in msg


def test_fp16_runs_on_resnet_but_not_on_moe_or_pipelines():
    ok(conf(train={"precision": "fp16"}, sweep={"world_size": [1, 2]}))
    msg = error_of(conf(MOE, train={"precision": "fp16"}))
    assert "train.precision='fp16' is built for workload resnet50" in msg and "workload=moe" in msg
    msg = error_of(conf(train={"precision": "fp16"}, parallel={"micro_batches": 2}))
    assert "micro_batches=2" in msg


def test_overlap_needs_pynative_and_no_compression():
    ok(conf(train={"mode": "pynative"}, parallel={"overlap_grad_comm": True, "comm_fusion": 1}))
    msg = error_of(conf(parallel={"overlap_grad_comm": True}))
    assert "parallel.overlap_grad_comm=true needs train.mode='pynative' (got 'graph')" in msg
    msg = error_of(
        conf(train={"mode": "pynative"}, parallel={"overlap_grad_comm": True, "grad_compression": "powersgd"})
    )
    assert "parallel.grad_compression='powersgd'" in msg
    msg = error_of(
        conf(
            train={"mode": "pynative"},
            parallel={"overlap_grad_comm": True, "pipeline_stages": 2, "micro_batches": 2},
            sweep={"world_size": [2]},
        )
    )
    assert "overlap_grad_comm=true is built for workload resnet50 without pipeline" in msg
    msg = error_of(conf(train={"mode": "pynative", "precision": "fp16"}, parallel={"overlap_grad_comm": True}))
    assert "train.precision='fp16'" in msg


def test_overflow_step_must_be_a_step_number():
    msg = error_of(conf(inject={"overflow_step": -1}))
    assert msg.startswith("inject.overflow_step: -1 must be at least 0")


# ---- skipped_steps: steps after warm-up that any rank skipped ---------------------------------------------


def test_skipped_steps_counts_steps_after_warmup_any_rank_skipped():
    rows = []
    for step in range(6):
        for rank in (0, 1):
            overflow = (step == 0) or (step == 3 and rank == 1) or (step == 4)
            rows.append(
                {
                    "rank": rank,
                    "step": step,
                    "step_time_s": 0.1,
                    "samples": 8,
                    "loss": 1.0,
                    "profiled": False,
                    "overflow": overflow,
                    "loss_scale": 1024.0,
                }
            )
    ws = pd.DataFrame(rows)
    series = step_series(ws, None, None, warmup=2)
    m = run_metrics(series, ws)
    assert m["skipped_steps"] == 2  # steps 3 and 4; step 0 is warm-up
    fp32 = ws.drop(columns=["overflow", "loss_scale"])
    assert "skipped_steps" not in run_metrics(step_series(fp32, None, None, warmup=2), fp32)  # unknown, not 0


# ---- predict: overlap and precision -----------------------------------------------------------------------


def hw(precisions=None, precision_scale=None) -> Hardware:
    return Hardware(
        name="test",
        kind="spec",
        links=[Link("L", BW / 1e9, LAT * 1e6, None)],
        overlap="none",
        compute_scale=1.0,
        precisions=precisions,
        precision_scale=precision_scale or {},
    )


def test_overlap_on_hides_buckets_ready_before_backward_ends_and_off_hides_nothing():
    c = cal(tensor_bytes=[4 * MB, 4 * MB], base_ref_s=0.3, compute_share=1.0)
    t_bucket = 2 * LAT + 4 * MB / BW  # 2 ranks: 2 hops, factor 1
    on = predict(c, {"comm_fusion": 0, "overlap_grad_comm": True}, hw())
    # the first bucket is ready half-way through backward (0.2 s): hidden; the last only at its end: exposed
    assert on["breakdown"]["overlapped_s"] == pytest.approx(t_bucket)
    assert on["breakdown"]["communication_not_overlapped_s"] == pytest.approx(t_bucket)
    off = predict(c, {"comm_fusion": 0, "overlap_grad_comm": False}, hw())
    assert off["breakdown"]["overlapped_s"] == 0
    assert off["breakdown"]["communication_not_overlapped_s"] == pytest.approx(2 * t_bucket)
    assert off["step_time_s"] - on["step_time_s"] == pytest.approx(t_bucket)
    assert on["settings"]["overlap_grad_comm"] is True


def test_precision_scales_compute_but_not_the_gradient_bytes():
    c = cal(base_ref_s=0.3, compute_share=1.0)
    h = hw(precisions=["fp32", "fp16"], precision_scale={"fp16": 0.5})
    fp32 = predict(c, {"comm_fusion": "all", "precision": "fp32"}, h)
    fp16 = predict(c, {"comm_fusion": "all", "precision": "fp16"}, h)
    assert fp16["breakdown"]["computing_s"] == pytest.approx(0.5 * fp32["breakdown"]["computing_s"])
    assert fp16["collectives"]["bytes"] == fp32["collectives"]["bytes"] == 8 * MB  # AMP keeps fp32 gradients
    unknown = predict(c, {"comm_fusion": "all", "precision": "fp16"}, hw())  # no factor: compute kept, said so
    assert unknown["step_time_s"] == pytest.approx(fp32["step_time_s"])
    assert any("no measured compute factor" in a for a in unknown["assumptions"])


def test_a_precision_the_hardware_lacks_is_a_user_error():
    with pytest.raises(UserError, match="precision='bf16': test has no kernels for it"):
        predict(cal(), {"precision": "bf16"}, hw(precisions=["fp32", "fp16"]))


# ---- grad_overlap: the overlapped run's own spans ---------------------------------------------------------


def test_grad_overlap_metrics_from_spans_by_hand():
    from analyzers.analyses.grad_overlap import analysis
    from analyzers.registry import Context

    rows = []
    for step in (0, 1, 2):  # step 0 is warm-up
        for rank in (0, 1):
            t = 100.0 * step
            wait = 0.2 if rank == 0 else 0.4
            rows += [
                {"rank": rank, "step": step, "kind": "backward", "start_ts": t, "end_ts": t + 1.0},
                {"rank": rank, "step": step, "kind": "allreduce_wait", "start_ts": t + 1.0, "end_ts": t + 1.0 + wait},
            ]
            # 4 buckets: 3 issued during backward, the last one after it
            rows += [
                {"rank": rank, "step": step, "kind": "allreduce", "start_ts": t + s, "end_ts": t + 1.5}
                for s in (0.3, 0.6, 0.9, 1.05)
            ]
    out = analysis(Context(spans=pd.DataFrame(rows), config={"train": {"warmup_steps": 1}}))
    assert out.metrics["grad_comm_wait_s"] == pytest.approx((0.2 + 0.4) / 2)
    assert out.metrics["grad_buckets_early"] == pytest.approx(0.75)
    none = analysis(Context(spans=pd.DataFrame([r for r in rows if r["kind"] != "allreduce_wait"]), config={}))
    assert none.metrics == {}  # a run without overlap: unknown, not 0
