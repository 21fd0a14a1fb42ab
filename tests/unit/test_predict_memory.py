"""The memory model (perfbench/predict/memory.py): hand-computed model states per ZeRO stage, buffers, the fit of
activations per sample, and predictions for settings not in the calibration (no MindSpore, no msrun)."""

from __future__ import annotations

import pytest

from perfbench.errors import UserError
from perfbench.predict.memory import (
    MemoryObservation,
    buffer_bytes,
    fit_memory,
    largest_bucket_bytes,
    memory_target,
    model_states,
    predict_memory,
)

MiB = 2**20


def test_model_states_per_zero_stage_by_hand():
    # P = 1000 parameters, 2 data-parallel ranks, Adam (2 states): params 4 B, grads 4 B, optimizer 8 B per parameter
    assert model_states(1000, 2, 0, 2) == {
        "params_bytes": 4000,
        "grads_bytes": 4000,
        "optimizer_bytes": 8000,
        "total_bytes": 16000,
    }
    assert model_states(1000, 2, 1, 2)["total_bytes"] == 4000 + 4000 + 8000 / 2  # 12000
    assert model_states(1000, 2, 2, 2)["total_bytes"] == 4000 + 4000 / 2 + 8000 / 2  # 10000
    # where gradient sharding is emulated (CPU), stage 2 keeps whole gradients: 4000 + 4000 + 4000
    assert model_states(1000, 2, 2, 2, grads_sharded=False)["total_bytes"] == 12000
    # momentum (1 state) over 4 ranks, stage 1: 4000 + 4000 + 4000 / 4
    assert model_states(1000, 4, 1, 1)["total_bytes"] == 9000
    # the ZeRO paper's fp32 reading of its 7.5 B-parameter example on 64 ranks: stage 2 with Adam
    # 7.5e9 x (4 + 4/64 + 8/64) = 31.40625e9 bytes
    assert model_states(7_500_000_000, 64, 2, 2)["total_bytes"] == pytest.approx(31.40625e9)
    with pytest.raises(UserError, match="zero_stage=3"):
        model_states(1000, 2, 3, 2)


def test_buffers_and_buckets_by_hand():
    assert buffer_bytes(1000, 1, None) == 0  # one rank: no all-reduce
    assert buffer_bytes(1000, 2, 1000) == 2000  # flattened bucket + its all-reduced copy (ZeRO's broadcast: in place)
    assert buffer_bytes(1000, 2, None) == 8000  # unknown bucket: every gradient in one
    assert largest_bucket_bytes("all", 1000) == 4000
    assert largest_bucket_bytes(32, 10**9) == 32 * MiB
    assert largest_bucket_bytes(32, 1000) == 4000  # a bucket holds at most every gradient
    assert largest_bucket_bytes(0, 1000) is None


def _obs(z, r, b, peak, rid=None):
    return MemoryObservation(
        rid or f"z{z}r{int(r)}b{b}",
        params=1_000_000,
        dp=2,
        zero_stage=z,
        states_per_param=2,
        recompute=r,
        samples_in_flight=b,
        largest_bucket_bytes=2 * MiB,
        peak_bytes=peak,
    )


# A machine whose truth is: baseline 400e6, activations 1e6 B/sample (0.3e6 with recompute), P = 1e6 (4 MB each of
# params and grads, 8 MB of Adam state), 2 ranks, 2 MiB buckets.
#   z0, no recompute, b 8:  400e6 + (4e6 + 4e6 + 8e6) + 8e6 + 2 x 2 MiB                   = 428_194_304
#   z1, no recompute, b 8:  400e6 + (4e6 + 4e6 + 4e6) + 8e6 + 2 x 2 MiB (broadcast in place) = 424_194_304
#   z0, recompute,    b 8:  400e6 + 16e6 + 2.4e6 + 4_194_304                               = 422_594_304
#   z0, no recompute, b 16: 400e6 + 16e6 + 16e6 + 4_194_304                                = 436_194_304
TRUTH = {(0, False, 8): 428_194_304, (1, False, 8): 424_194_304, (0, True, 8): 422_594_304, (0, False, 16): 436_194_304}


def test_fit_with_the_baseline_given_and_predict_held_out_settings():
    obs = [_obs(0, False, 8, TRUTH[0, False, 8]), _obs(0, True, 8, TRUTH[0, True, 8])]
    cal = fit_memory(obs, baseline_bytes=400e6)
    assert cal.activation_bytes_per_sample[False] == pytest.approx(1e6)
    assert cal.activation_bytes_per_sample[True] == pytest.approx(0.3e6)
    assert cal.residual == pytest.approx(0, abs=1e-12)
    s = dict(params=1_000_000, dp=2, states_per_param=2, largest_bucket_bytes=2 * MiB)
    p = predict_memory(cal, dict(s, zero_stage=1, recompute=False, samples_in_flight=8))
    assert p["peak_bytes"] == pytest.approx(TRUTH[1, False, 8])
    assert p["parts"]["optimizer_bytes"] == 4e6 and p["parts"]["grads_bytes"] == 4e6
    # stage 2 on the measured (CPU) machine: gradients stay whole (emulated), so the same as stage 1
    assert predict_memory(cal, dict(s, zero_stage=2, recompute=False, samples_in_flight=8))[
        "peak_bytes"
    ] == pytest.approx(TRUTH[1, False, 8])
    assert predict_memory(cal, dict(s, zero_stage=0, recompute=False, samples_in_flight=16))[
        "peak_bytes"
    ] == pytest.approx(TRUTH[0, False, 16])
    lo, hi = p["interval"]["low"], p["interval"]["high"]
    assert lo < p["peak_bytes"] < hi and p["interval"]["sigma_rel"] == 0.02  # the floor: a perfect fit
    assert p["fits"] is None  # no capacity on the measured machine


def test_fit_without_baseline_needs_two_batch_sizes():
    obs = [
        _obs(0, False, 8, TRUTH[0, False, 8]),
        _obs(0, False, 16, TRUTH[0, False, 16]),
        _obs(0, True, 8, TRUTH[0, True, 8]),
    ]
    cal = fit_memory(obs)
    assert cal.baseline_bytes == pytest.approx(400e6)
    assert cal.activation_bytes_per_sample[False] == pytest.approx(1e6)
    assert cal.activation_bytes_per_sample[True] == pytest.approx(0.3e6)
    with pytest.raises(UserError, match="same samples in flight"):
        fit_memory(obs[:1])


def test_ascend_profile_shards_gradients_and_checks_capacity():
    from perfbench.predict.hardware import load

    hw = load("ascend910")
    assert hw.device_memory_bytes == 32 * 2**30
    cal = fit_memory([_obs(0, False, 8, TRUTH[0, False, 8])], baseline_bytes=400e6)
    s = dict(
        params=1_000_000, dp=2, states_per_param=2, largest_bucket_bytes=2 * MiB, recompute=False, samples_in_flight=8
    )
    p = predict_memory(cal, dict(s, zero_stage=2), hw)
    # no process baseline on the device; gradients really sharded: 4e6 + 2e6 + 4e6 + 8e6 (activations)
    # + 2 x 2 MiB (bucket, its all-reduced copy) = 22_194_304
    assert p["peak_bytes"] == pytest.approx(22_194_304)
    assert p["fits"] is True and p["capacity_bytes"] == hw.device_memory_bytes
    big = predict_memory(cal, dict(s, zero_stage=0, params=3_000_000_000), hw)  # 48 GB of states: does not fit
    assert big["fits"] is False


def test_memory_target_resolves_and_rejects():
    ref = {
        "params": 1000,
        "world_size": 2,
        "pipeline_stages": 1,
        "batch_size": 8,
        "micro_batches": 1,
        "comm_fusion": "all",
        "zero_stage": 0,
        "recompute": False,
        "optimizer": "adamw",
    }
    t = memory_target(ref, {"zero_stage": 1, "recompute": "true", "micro_batches": 2, "optimizer": "momentum"})
    assert t["recompute"] is True and t["samples_in_flight"] == 4 and t["states_per_param"] == 1 and t["dp"] == 2
    assert t["largest_bucket_bytes"] == 4000
    with pytest.raises(UserError, match="recompute='maybe'"):
        memory_target(ref, {"recompute": "maybe"})
    with pytest.raises(UserError, match="zero_stage=5"):
        memory_target(ref, {"zero_stage": 5})
    with pytest.raises(UserError, match="grad_compression"):
        memory_target(ref, {"grad_compression": "fp16"})


def test_cli_memory_keys_need_memory_flag_and_the_answer_is_json(tmp_path, capsys):
    import json

    from perfbench.cli import main
    from perfbench.store import Store

    store = Store(tmp_path / "res")
    cfg = {
        "workload": "resnet50",
        "world_size": 2,
        "model": {},
        "train": {"batch_size": 8, "optimizer": "adamw", "recompute": False},
        "parallel": {"zero_stage": 0, "comm_fusion": "all", "pipeline_stages": 1, "micro_batches": 1},
    }
    store.write_run(
        {
            "run_id": "m0",
            "sweep_id": "s",
            "status": "ok",
            "config": cfg,
            "settings": {},
            "timings": {},
            "metrics": {"peak_memory_bytes": 400e6 + 16e6 + 8e6 + 8e6},
        }
    )  # P = 1e6: states 16e6, buffers 8e6
    d = store.artifacts_dir("m0") / "metrics"
    d.mkdir(parents=True)
    (d / "rank0.meta.json").write_text(json.dumps({"params": 1_000_000, "baseline_rss_bytes": 400e6}))
    assert main(["predict", "--results", str(tmp_path / "res"), "--from", "m0", "--set", "zero_stage=1"]) == 2
    assert "--set zero_stage: only the memory model knows it (add --memory)" in capsys.readouterr().err
    assert (
        main(
            [
                "predict",
                "--results",
                str(tmp_path / "res"),
                "--from",
                "m0",
                "--memory",
                "--set",
                "zero_stage=1",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    # activations 8e6 / 8 samples = 1e6 per sample; stage 1: 400e6 + (4e6 + 4e6 + 4e6) + 8e6 (buffers) + 8e6
    assert out["peak_bytes"] == pytest.approx(428e6) and out["settings"]["zero_stage"] == 1
    assert out["parts"]["optimizer_bytes"] == 4e6 and out["inputs"] == ["m0"]
