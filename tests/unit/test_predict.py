"""`perfbench predict`: the model reacts to each knob in the right direction and by the right amount.

The calibration and the hardware are written by hand here (no store, no fit), so every expected value is
computed in the test from the textbook formulas: ring all-reduce moves 2(n-1)/n x bytes and pays 2(n-1)
latency hops, fp16 sends 2 bytes per 4-byte gradient, GPipe/1F1B with S equal stages and M micro-batches
idles (S-1)/(M+S-1) of the step."""

from __future__ import annotations

import pandas as pd
import pytest

from perfbench.predict.hardware import Hardware, Link
from perfbench.predict.fit import fit
from perfbench.predict.model import Calibration, predict
from perfbench.predict.observe import Observation
from perfbench.predict.replay import replay_step
from tests.support import fixture_path

MB = 1e6
TENSORS = [4 * MB, 2 * MB, 1 * MB, 1 * MB]  # fp32 gradient bytes in backward order: 8 MB in all
BW = 10e9  # 10 GB/s
LAT = 5e-6  # 5 us per ring hop


def hw(overlap="none", contention=None) -> Hardware:
    return Hardware(
        name="test",
        kind="measured" if contention else "spec",
        links=[Link("L", BW / 1e9, LAT * 1e6, None)],
        overlap=overlap,
        contention=contention or {},
        compute_scale=1.0,
    )


def cal(**kw) -> Calibration:
    c = Calibration(
        inputs=["by-hand"],
        batch_ref=8,
        base_ref_s=0.3,
        compute_share=0.9,
        tensor_bytes=list(TENSORS),
        machine=hw(),
        reference={
            "world_size": 2,
            "batch_size": 8,
            "micro_batches": 1,
            "pipeline_stages": 1,
            "pipeline_schedule": "1f1b",
            "comm_fusion": 0,
            "grad_compression": "none",
            "compression_ratio": 0.1,
        },
    )
    for k, v in kw.items():
        setattr(c, k, v)
    return c


def test_fp16_halves_the_bytes_term_and_keeps_the_latency_of_one_bucket():
    c = cal()
    none = predict(c, {"comm_fusion": "all", "grad_compression": "none"})["collectives"]
    half = predict(c, {"comm_fusion": "all", "grad_compression": "fp16"})["collectives"]
    assert none["bytes_s"] == pytest.approx(1.0 * 8 * MB / BW)  # 2(n-1)/n = 1 at n = 2
    assert half["bytes_s"] == pytest.approx(0.5 * 8 * MB / BW)
    assert half["latency_s"] == none["latency_s"] == pytest.approx(2 * LAT)


def test_one_bucket_has_one_latency_term_per_tensor_buckets_one_each():
    c = cal()
    one = predict(c, {"comm_fusion": "all", "world_size": 4})["collectives"]
    each = predict(c, {"comm_fusion": 0, "world_size": 4})["collectives"]
    assert one["count"] == 1 and each["count"] == 4
    assert one["latency_s"] == pytest.approx(2 * 3 * LAT)  # one all-reduce, 2(n-1) hops
    assert each["latency_s"] == pytest.approx(4 * 2 * 3 * LAT)
    assert each["bytes_s"] == pytest.approx(one["bytes_s"])  # same bytes, only more latency terms
    # 2.5 MB buckets: 4 | 2 | 1+1 (greedy in backward order, a tensor bigger than the cap gets its own)
    mid = predict(c, {"comm_fusion": "2.5", "world_size": 4})["collectives"]
    assert mid["count"] == 3


def test_ring_factor_at_two_and_eight_ranks():
    c = cal()
    two = predict(c, {"comm_fusion": "all", "world_size": 2})
    eight = predict(c, {"comm_fusion": "all", "world_size": 8})
    assert two["collectives"]["bytes_s"] == pytest.approx(2 * 1 / 2 * 8 * MB / BW)
    assert eight["collectives"]["bytes_s"] == pytest.approx(2 * 7 / 8 * 8 * MB / BW)
    assert eight["collectives"]["latency_s"] == pytest.approx(14 * LAT)
    # no overlap: the whole collective is exposed and adds to the per-rank compute (0.3 s at 8 samples)
    assert eight["step_time_s"] == pytest.approx(0.3 + 14 * LAT + 1.75 * 8 * MB / BW)


def test_more_micro_batches_shrink_the_bubble_as_the_schedule_says():
    c = cal()
    for sched in ("gpipe", "1f1b"):
        p4 = predict(c, {"world_size": 4, "pipeline_stages": 4, "micro_batches": 4, "pipeline_schedule": sched})
        p8 = predict(c, {"world_size": 4, "pipeline_stages": 4, "micro_batches": 8, "pipeline_schedule": sched})
        assert p4["bubble_fraction"] == pytest.approx(3 / 7)
        assert p8["bubble_fraction"] == pytest.approx(3 / 11)
        # one micro-batch of 8/M samples takes 0.3 x (8/M)/8 s through the whole model, 1/4 of it per stage
        t = 0.3 / 4 / 4
        assert p4["breakdown"]["bubble_s"] == pytest.approx(3 * t)
        assert p4["step_time_s"] == pytest.approx((4 + 3) * t)  # D = 1: no gradient all-reduce
        assert p8["step_time_s"] == pytest.approx((8 + 3) * 0.3 / 8 / 4)


def test_world_size_changes_per_rank_compute_only_through_batch_semantics():
    c = cal()
    h = hw()
    p2 = predict(c, {"world_size": 2}, h)
    p8 = predict(c, {"world_size": 8}, h)
    assert p2["breakdown"]["computing_s"] == p8["breakdown"]["computing_s"] == pytest.approx(0.3 * 0.9)
    big = predict(c, {"world_size": 8, "batch_size": 16}, h)
    assert big["breakdown"]["computing_s"] == pytest.approx(2 * 0.3 * 0.9)  # batch_size is per replica
    assert p8["throughput"] == pytest.approx(8 * 8 / p8["step_time_s"])
    # a measured machine whose 2 ranks share cores: its fitted slowdown is the only other way in
    shared = predict(c, {"world_size": 2}, hw(contention={1: 1.0, 2: 1.5}))
    assert shared["breakdown"]["computing_s"] == pytest.approx(1.5 * 0.3 * 0.9)
    # scaling efficiency against one replica of the same settings: t(1) / t(n) with per-rank batch fixed
    assert p8["scaling_efficiency"] == pytest.approx(0.3 / p8["step_time_s"])


def test_extra_micro_batches_cost_their_fitted_overhead_once_each():
    c = cal(per_microbatch_s={2: 0.05})
    p = predict(c, {"world_size": 2, "micro_batches": 4, "comm_fusion": "all"})
    assert p["step_time_s"] == pytest.approx(0.3 + 3 * 0.05 + 2 * LAT + 8 * MB / BW)
    assert p["collectives"]["count"] == 1  # gradient accumulation: one all-reduce per step, not per micro-batch


def test_overlap_window_hides_buckets_ready_before_backward_ends():
    c = cal(tensor_bytes=[4 * MB, 4 * MB], base_ref_s=0.3, compute_share=1.0)
    h = hw(overlap="window")
    backward = 0.3 * 2 / 3
    t_bucket = 2 * LAT + 4 * MB / BW  # n = 2
    one = predict(c, {"comm_fusion": "all"}, h)  # ready only when backward is done: nothing hidden
    assert one["breakdown"]["communication_not_overlapped_s"] == pytest.approx(2 * LAT + 8 * MB / BW)
    two = predict(c, {"comm_fusion": 0}, h)  # first bucket ready half-way through backward
    assert two["breakdown"]["communication_not_overlapped_s"] == pytest.approx(t_bucket)
    assert two["breakdown"]["overlapped_s"] == pytest.approx(t_bucket)
    assert two["step_time_s"] == pytest.approx(0.3 + t_bucket)
    assert backward > t_bucket  # (the first bucket fits in the window)


def test_compression_ratios_set_the_bytes():
    c = cal()
    psgd = predict(c, {"comm_fusion": "all", "grad_compression": "powersgd", "compression_ratio": 0.1})["collectives"]
    assert psgd["count"] == 2 and psgd["bytes_s"] == pytest.approx(0.1 * 8 * MB / BW)  # P and Q all-reduces
    topk = predict(c, {"comm_fusion": "all", "grad_compression": "topk", "compression_ratio": 0.1, "world_size": 4})[
        "collectives"
    ]
    # values + indices: 0.1 x 8 MB per rank, all-gathered: each rank receives (n-1) x that
    assert topk["count"] == 2 and topk["bytes_s"] == pytest.approx(3 * 0.1 * 8 * MB / BW)
    assert topk["latency_s"] == pytest.approx(2 * 3 * LAT)


def _obs(rid, n, fusion, step, comm_s, sizes, times, comp="none", M=1):
    co = pd.DataFrame(
        {
            "op_name": [f"op{i}" for i in range(len(sizes))],
            "op_type": "allreduce",
            "group_size": n,
            "size_bytes": sizes,
            "time_s": times,
            "start_us": range(len(sizes)),
        }
    )
    s = {
        "world_size": n,
        "batch_size": 8,
        "micro_batches": M,
        "pipeline_stages": 1,
        "pipeline_schedule": "1f1b",
        "comm_fusion": fusion,
        "grad_compression": comp,
        "compression_ratio": 0.1,
        "fusion_impl": "perfbench",
    }
    return Observation(
        run_id=rid,
        settings=s,
        step_time_s=step,
        step_samples=[step] * 5,
        samples_per_step=8.0 * n,
        computing_s=(step - comm_s) * 0.9,
        comm_exposed_s=comm_s,
        overlapped_s=0.0,
        free_s=(step - comm_s) * 0.1,
        collectives=co if n > 1 else co.iloc[:0],
        tensor_bytes=list(sizes) if fusion == 0 and n > 1 else None,
    )


def test_fit_recovers_latency_bandwidth_and_compute_from_runs_made_by_hand():
    t = [2 * LAT + b / BW for b in TENSORS]  # n = 2: 2 hops, factor 1
    one = 2 * LAT + 8 * MB / BW
    obs = [
        _obs("a", 1, 0, 0.3, 0.0, [], []),
        _obs("b", 2, 0, 0.45 + sum(t), sum(t), TENSORS, t),
        _obs("c", 2, "all", 0.45 + one, one, [8 * MB], [one]),
    ]
    c = fit(obs)
    link = c.machine.links[0]
    assert link.latency_us == pytest.approx(LAT * 1e6, rel=1e-6)
    assert link.bandwidth_gbps == pytest.approx(BW / 1e9, rel=1e-6)
    assert c.base_ref_s == pytest.approx(0.3) and c.machine.contention[2] == pytest.approx(1.5)
    assert c.residual == pytest.approx(0.0, abs=1e-9)
    # held out: 2.5 MB buckets = 3 all-reduces of 4, 2, 2 MB
    p = predict(c, {"comm_fusion": "2.5"})
    assert p["step_time_s"] == pytest.approx(0.45 + 3 * 2 * LAT + 8 * MB / BW)


def test_replay_follows_recorded_dependencies():
    # compute 0-10 and 20-30 us; a collective recorded 10-15 us ends before the second segment starts
    segs = [(0.0, 10.0), (20.0, 30.0)]
    assert replay_step(segs, [(10.0, 15.0, 5.0)], 0.0) == pytest.approx(25.0)  # gap 15-20 dropped
    # launched one gap after the collective it waited for: 15 + 2, then 10 us of work
    assert replay_step(segs, [(10.0, 15.0, 5.0)], 0.0, gap=2.0) == pytest.approx(27.0)
    assert replay_step(segs, [(10.0, 15.0, 8.0)], 0.0, gap=2.0) == pytest.approx(30.0)  # a slower collective delays it
    assert replay_step(segs, [], 0.0, gap=2.0, lead=1.0) == pytest.approx(1 + 10 + 2 + 10)


def test_replay_on_real_ascend_ranks():
    from perfbench.predict.replay import replay_path

    path = fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1")
    rows = {r["rank"]: r for r in replay_path(str(path))}
    assert sorted(rows) == [0, 1]
    # the profiler's own step (step_trace_time.csv, rank 0): computing + not-overlapped communication + free
    csv = pd.read_csv(path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    expected = (csv["Computing"] + csv["Communication(Not Overlapped)"] + csv["Free"]).iloc[0] / 1e6
    r0 = rows[0]
    assert r0["measured_s"] == pytest.approx(expected)
    assert r0["kernels"] == 187 and r0["collectives"] == 4
    # kernels and collectives alone cannot be longer than the step they ran in
    assert r0["critical_path_s"] <= r0["replay_s"] <= r0["measured_s"] * 1.01
    assert abs(r0["replay_error"]) < 0.25


def test_cli_errors_are_one_line(tmp_path, capsys):
    from perfbench.cli import main

    def run(*args):
        code = main(["predict", "--results", str(tmp_path), *args])
        return code, capsys.readouterr().err

    (tmp_path / "runs").mkdir()
    code, err = run("--from", "nothing", "--set", "warp=9")
    assert code == 2 and "--set warp: unknown setting" in err and "Traceback" not in err
    code, err = run("--from", "nothing", "--set", "world_size=two")
    assert code == 2 and "--set world_size='two': expected int" in err
    code, err = run("--from", "nothing")
    assert code == 2 and "no run 'nothing'" in err
    code, err = run()
    assert code == 2 and "--from SWEEP_OR_RUN is required" in err
    code, err = run("--replay", str(tmp_path))
    assert code == 2 and err.startswith("perfbench: error:")


def _store_with_two_runs(root):
    """A store holding a 1-rank and a 2-rank run written by hand (records and the tables predict reads)."""
    from perfbench.store import Store

    st = Store(root)
    t = [2 * LAT + b / BW for b in TENSORS]
    for n, step in ((1, 0.3), (2, 0.5)):
        rid = f"hand-ws{n}-r0"
        comm = sum(t) if n > 1 else 0.0
        st.write_run(
            {
                "run_id": rid,
                "sweep_id": "hand",
                "status": "ok",
                "settings": {"world_size": n},
                "config": {
                    "workload": "resnet50",
                    "world_size": n,
                    "train": {"batch_size": 8},
                    "parallel": {"comm_fusion": 0, "grad_compression": "none"},
                },
                "metrics": {
                    "step_time_s": step,
                    "profiled_step_time_s": 2 * step,  # profiler doubles the step
                    "computing_s": 2 * (step - comm) * 0.9,
                    "communication_not_overlapped_s": 2 * comm,
                    "overlapped_s": 0.0,
                    "free_s": 2 * (step - comm) * 0.1,
                    "samples_per_step": 8.0 * n,
                },
            }
        )
        st.write_table(
            rid,
            "step_metrics",
            pd.DataFrame({"step": range(5), "measured": True, "profiled": False, "step_time_s": [step] * 5}),
        )
        if n > 1:  # two ranks, two profiled steps, each op twice as long as unprofiled
            st.write_table(
                rid,
                "comm_ops",
                pd.DataFrame(
                    [
                        {
                            "rank": r,
                            "step": s,
                            "op_name": f"AllReduce-op{i}",
                            "op_type": "allreduce",
                            "group_size": 2,
                            "start_us": 1000.0 * i,
                            "elapse_ms": 2 * ti * 1e3,
                            "size_bytes": b,
                        }
                        for r in (0, 1)
                        for s in (3, 4)
                        for i, (b, ti) in enumerate(zip(TENSORS, t))
                    ]
                ),
            )
    st.write_sweep({"sweep_id": "hand", "runs": ["hand-ws1-r0", "hand-ws2-r0"]})
    return st, sum(t)


def test_calibration_from_the_store_scales_the_profiled_window_and_predicts_unrun_buckets(tmp_path):
    from perfbench.predict.fit import calibrate

    st, comm = _store_with_two_runs(tmp_path)
    c = calibrate(st, ["hand"])
    assert c.tensor_bytes == TENSORS  # the per-tensor run's all-reduces, backward order
    assert c.machine.links[0].latency_us == pytest.approx(LAT * 1e6, rel=1e-6)
    assert c.machine.links[0].bandwidth_gbps == pytest.approx(BW / 1e9, rel=1e-6)
    assert c.base_ref_s == pytest.approx(0.3) and c.compute_share == pytest.approx(0.9)
    assert c.machine.contention[2] == pytest.approx((0.5 - comm) / 0.3)
    assert predict(c, {})["step_time_s"] == pytest.approx(0.5)  # the reference (2-rank) run itself
    assert predict(c, {"comm_fusion": "all"})["step_time_s"] == pytest.approx(0.5 - comm + 2 * LAT + 8 * MB / BW)
    assert predict(c, {"world_size": 1})["scaling_efficiency"] == pytest.approx(1.0)


def test_dashboard_scaling_data_draws_the_predicted_curve(tmp_path):
    from dashboards.data import DashData

    _store_with_two_runs(tmp_path)
    frame, caption = DashData(tmp_path).predicted_scaling("hand", world_sizes=(1, 2, 4))
    assert frame["world_size"].tolist() == [1, 2, 4]
    two = frame.set_index("world_size").loc[2]
    assert two["throughput"] == pytest.approx(16 / 0.5)
    assert two["low"] <= two["throughput"] <= two["high"]
    assert "perfbench predict --from hand" in caption


def test_micro_batch_path_cost_is_fixed_plus_per_micro_batch_when_two_counts_were_run():
    # 1 rank: M = 1 takes 0.3 s; the micro-batch path costs 0.6 s once plus 0.25 s per extra micro-batch
    obs = [
        _obs("m1", 1, 0, 0.3, 0.0, [], []),
        _obs("m2", 1, 0, 0.3 + 0.6 + 0.25, 0.0, [], [], M=2),
        _obs("m4", 1, 0, 0.3 + 0.6 + 3 * 0.25, 0.0, [], [], M=4),
    ]
    c = fit(obs)
    assert c.per_microbatch_s[1] == pytest.approx(0.25) and c.microbatch_fixed_s[1] == pytest.approx(0.6)
    assert predict(c, {"micro_batches": 8})["step_time_s"] == pytest.approx(0.3 + 0.6 + 7 * 0.25)
    # one count only: the whole extra time is taken per micro-batch (no fixed part can be told apart)
    c2 = fit(obs[:2])
    assert c2.microbatch_fixed_s[1] == 0.0
    assert predict(c2, {"micro_batches": 4})["step_time_s"] == pytest.approx(0.3 + 3 * 0.85)
