"""Tensor (model) parallelism for the MoE transformer: layout rules, groups, collective counts, and
real msrun runs against the single-rank model (workloads/parallel/tensor.py)."""

from __future__ import annotations

import math

import pytest

from tests.integration.test_pipeline import MOE, _par
from tests.support import background_launches, prefetched
from workloads.parallel.rules import layout_groups, stage_layout, validate_parallel
from workloads.parallel.tensor import column_slice, qkv_rows

# ---------------------------------------------------------------------------------------------- rules


def test_layout_is_tensor_parallel_innermost():
    # Megatron's order: rank = stage * (D*T) + replica * T + slice
    assert [stage_layout(r, 8, 2, 2) for r in range(8)] == [
        (0, 0, 2),
        (0, 0, 2),
        (0, 1, 2),
        (0, 1, 2),
        (1, 0, 2),
        (1, 0, 2),
        (1, 1, 2),
        (1, 1, 2),
    ]
    assert [stage_layout(r, 4, 2) for r in range(4)] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]


def test_layout_groups_name_every_dimension():
    # dp2 x tp2: two tensor-parallel pairs of neighbours, two data-parallel groups across them
    assert layout_groups(4, 1, 2) == {
        "pb_tp_s0_d0": [0, 1],
        "pb_tp_s0_d1": [2, 3],
        "pb_dp_stage0_tp0": [0, 2],
        "pb_dp_stage0_tp1": [1, 3],
    }
    # tp2 x pp2: no data parallel; slice t of stage 0 talks to slice t of stage 1
    assert layout_groups(4, 2, 2) == {
        "pb_tp_s0_d0": [0, 1],
        "pb_tp_s1_d0": [2, 3],
        "pb_p2p_0_2": [0, 2],
        "pb_p2p_1_3": [1, 3],
    }
    # dp4: the world group only (named by MindSpore)
    assert layout_groups(4, 1, 1) == {}
    assert layout_groups(4, 2, 1) == {
        "pb_dp_stage0": [0, 1],
        "pb_dp_stage1": [2, 3],
        "pb_p2p_0_2": [0, 2],
        "pb_p2p_1_3": [1, 3],
    }


def test_shards_partition_the_weights():
    # H = 8, T = 2: rank 0 keeps q rows 0-3, k rows 8-11, v rows 16-19; rank 1 the others
    assert qkv_rows(8, 2, 0).tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]
    assert sorted(qkv_rows(8, 2, 0).tolist() + qkv_rows(8, 2, 1).tolist()) == list(range(24))
    assert column_slice(32, 4, 3) == slice(24, 32)


def test_rules_accept_tensor_parallel_layouts():
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2), 2) == []
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2), 4) == []  # dp2 x tp2
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2, pipeline_stages=2, micro_batches=2), 4) == []


@pytest.mark.parametrize(
    "model,par,ws,needle",
    [
        ({}, _par(tensor_parallel=4), 4, "parallel.tensor_parallel=4 does not divide model.num_heads=2"),
        (
            dict(hidden_size=18),
            _par(tensor_parallel=4),
            4,
            "parallel.tensor_parallel=4 does not divide model.hidden_size=18",
        ),
        (
            dict(ffn_hidden_size=30),
            _par(tensor_parallel=4),
            4,
            "does not divide the feed-forward size model.ffn_hidden_size=30",
        ),
        (
            {},
            _par(tensor_parallel=2),
            3,
            "world_size=3 is not a multiple of parallel.pipeline_stages=1 x parallel.tensor_parallel=2",
        ),
        (
            {},
            _par(tensor_parallel=2, pipeline_stages=2, micro_batches=2),
            6,
            "world_size=6 is not a multiple of parallel.pipeline_stages=2 x parallel.tensor_parallel=2",
        ),
        ({}, _par(tensor_parallel=0), 2, "parallel.tensor_parallel must be a positive integer, got 0"),
        (
            {},
            _par(tensor_parallel=2, grad_compression="fp16"),
            4,
            "grad_compression='fp16' with parallel.tensor_parallel=2",
        ),
        ({}, _par(tensor_parallel=2, comm_fusion=4), 4, "comm_fusion=4 with parallel.tensor_parallel=2"),
    ],
)
def test_rules_reject_tensor_parallel_layouts_naming_key_and_value(model, par, ws, needle):
    errs = validate_parallel("moe", dict(MOE, **model), par, ws)
    assert any(needle in e for e in errs), errs


def test_resnet_tensor_parallel_is_a_config_error():
    errs = validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(tensor_parallel=2), 2)
    assert errs == [
        "parallel.tensor_parallel=2: workload resnet50 has no tensor-parallel implementation (only "
        "'moe' splits its attention heads and feed-forward over ranks); use tensor_parallel=1"
    ]


# ---------------------------------------------------------------------------------------------- real runs
# Two 4-rank layouts, launched together (with the session's shared MoE runs, tests/integration/test_pipeline.py) and
# profiled (level light, steps 1-2):
#   dp2tp2: 2 replicas x 2 tensor-parallel slices, micro_batches 2, EP_MODEL -> must train like "ep2"
#           (2 expert-parallel replicas holding whole layers)
#   tp2pp2: 2 pipeline stages x 2 slices, micro_batches 2 -> must train like "ref" (one process)

TP_SPECS = {
    "dp2tp2": (4, {"tensor_parallel": 2, "micro_batches": 2}, "ep"),
    "tp2pp2": (4, {"tensor_parallel": 2, "pipeline_stages": 2, "micro_batches": 2}, "pp"),
}


def prefetch_runs(tmp_path_factory):
    """These runs and the session's MoE runs (test_pipeline.moe_runs, which test_moe.py and test_pipeline.py read
    then), started in the background when the session collected this module (tests/conftest.py): the tests compare
    losses, counts and profiles, not times."""
    from tests.integration.test_pipeline import PP_SPECS

    with background_launches(*PP_SPECS, *TP_SPECS):
        return _tp_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def tp_runs(tmp_path_factory):
    return prefetched(__name__, _tp_runs, tmp_path_factory)


def _tp_runs(tmp_path_factory):
    import copy
    import threading

    from tests.integration.test_pipeline import BASE, EP_MODEL, launch_run, moe_runs

    shared = {}
    t = threading.Thread(target=lambda: shared.update(moe_runs(tmp_path_factory)))
    t.start()
    out = tmp_path_factory.mktemp("tp_runs")
    runs = {}

    def go(name):
        ws, par, model = TP_SPECS[name]
        cfg = copy.deepcopy(BASE)
        cfg.update(run_id=name, world_size=ws, output_dir=str(out / name / "artifacts"))
        cfg["parallel"].update(par)
        cfg["model"] = dict(cfg["model"], **(EP_MODEL if model == "ep" else {}))
        cfg["profile"] = {"enabled": True, "steps": 2, "level": "light"}
        runs[name] = launch_run(cfg, timeout_s=300)

    threads = [threading.Thread(target=go, args=(n,)) for n in TP_SPECS]
    for th in threads:
        th.start()
    for th in threads + [t]:
        th.join()
    for name, run in runs.items():
        assert run.res.status == "ok", f"{name}: {run.res.reason}\n{run.res.log_tail}"
    return runs, shared


def _losses(run, rank):
    return [s["loss"] for s in run.steps(rank)]


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_tensor_parallel_layouts_train_like_the_unsplit_model(tp_runs):
    runs, shared = tp_runs
    ref, ep2 = _losses(shared["ref"], 0), _losses(shared["ep2"], 0)
    for rank in range(4):  # the tolerance of tests/integration/test_pipeline.py's pipeline-vs-one-process comparisons
        assert _losses(runs["tp2pp2"], rank) == pytest.approx(ref, rel=2e-4, abs=2e-5), rank
        assert _losses(runs["dp2tp2"], rank) == pytest.approx(ep2, rel=2e-4, abs=2e-5), rank
    # samples are counted once per replica (slice 0), like the unsplit runs
    tot = [sum(runs["dp2tp2"].steps(r)[i]["samples"] for r in range(4)) for i in range(4)]
    assert tot == [sum(shared["ep2"].steps(r)[i]["samples"] for r in range(2)) for i in range(4)]
    m = runs["dp2tp2"].meta(1)
    assert (m["tp_group"], m["dp_group"], m["tp_index"], m["dp_size"]) == ("pb_tp_s0_d0", "pb_dp_stage0_tp1", 1, 2)
    assert m["parallel_groups"]["pb_tp_s0_d1"] == {
        "ranks": [2, 3],
        "kind": "tp",
        "source": "workload",
        "label": "pb_tp_s0_d1",
    }
    # the expert counters: slice 0 of each replica reports them, and they add up like ep2's two ranks
    for i in range(4):
        a, b = runs["dp2tp2"].steps(0)[i], runs["dp2tp2"].steps(2)[i]
        assert "tokens_per_expert" not in runs["dp2tp2"].steps(1)[i]
        assert a["tokens_per_expert"] == shared["ep2"].steps(0)[i]["tokens_per_expert"]
        assert b["tokens_per_expert"] == shared["ep2"].steps(1)[i]["tokens_per_expert"]


# Hand-computed collectives per step (model MOE: H=16, E=4, L=2, seq 8, batch 8, fp32 = 4 bytes).
# Per micro-batch (4 sequences = 32 tokens) and MoE block on a rank, each of forward, the backward's
# re-materialized forward and backward runs 2 tensor-parallel all-reduces (g/f after/before attention: tokens x H;
# after/before the experts: the capacity buffer E x C x H) and, with expert parallel, 2 expert collectives.
def _dp2tp2_expected():
    C = math.ceil(1.0 * 32 * 2 / 4)  # capacity_factor 1.0 (EP_MODEL): 16 slots per expert
    tp = 3 * 2 * 2 * (32 * 16 + 4 * C * 16) * 4  # 3 passes x 2 blocks x 2 micro-batches
    ep = 3 * 2 * 2 * (2 * 2 * 4 * C * 16 * 4)  # dispatch + combine: AllReduce of padded [D=2, E, C, H] each
    # one flat gradient all-reduce of the weights a tensor-parallel rank shares with its other replica:
    # embedding 64x16 + positions 8x16; per block: 2 LayerNorms (4 x 16), Q/K/V slice 24x16 + 24,
    # output projection 16x8 + bias 16, router 16x4; head LayerNorm 32 + Dense 16x64 + 64 (experts stay local)
    shared = 64 * 16 + 8 * 16 + 2 * (64 + 24 * 16 + 24 + 16 * 8 + 16 + 16 * 4) + 32 + 16 * 64 + 64
    stats = (2 + 4 + 1) * 4  # the step's loss/aux/expert counters, one small world all-reduce
    return {
        "tp": (24, tp),
        "ep": (24, ep),
        "dp": (1, shared * 4),
        "total": (24 + 24 + 1 + 1, tp + ep + shared * 4 + stats),
    }


def _tp2pp2_expected():
    C = math.ceil(2.0 * 32 * 2 / 4)  # capacity_factor 2.0: 32
    tp = 3 * 1 * 2 * (32 * 16 + 4 * C * 16) * 4  # one block per stage (costs 0.25, 1, 1, 0.5 split in two)
    p2p = 2 * 4 * 8 * 16 * 4  # 2 micro-batches' activations (stage 0) or gradients (stage 1) of [4, 8, 16]
    return {"tp": (12, tp), "total": (12 + 2 + 1, tp + p2p + 28)}


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_collectives_per_step_match_hand_counts(tp_runs):
    runs, _ = tp_runs
    exp = _dp2tp2_expected()
    assert exp["total"] == (50, 284892)
    for r in range(4):
        for s in runs["dp2tp2"].steps(r):
            assert (s["collectives"], s["comm_bytes"]) == exp["total"], (r, s["step"])
        m = runs["dp2tp2"].meta(r)
        assert (m["tp_collectives_per_step"], m["tp_comm_bytes_per_step"]) == exp["tp"]
        assert m["expert_comm_bytes_per_step"] == exp["ep"][1]
        assert m["bytes_per_step_uncompressed"] == exp["dp"][1]
    exp = _tp2pp2_expected()
    for r in range(4):
        for s in runs["tp2pp2"].steps(r)[1:]:  # step 0 of stage 0 also sends the activation shape (9 floats)
            assert (s["collectives"], s["comm_bytes"]) == exp["total"], (r, s["step"])


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_profile_classes_tensor_parallel_and_expert_traffic(tp_runs):
    """The CPU profile's collectives, classed by the analyzers, agree with the hand counts per step."""
    from perfbench.run.ingest import load_run_profile, read_meta, read_spans, read_workload_steps, store_analysis

    runs, _ = tp_runs
    expect = {"dp2tp2": _dp2tp2_expected(), "tp2pp2": _tp2pp2_expected()}
    for name, run in runs.items():
        md = run.art / "metrics"
        steps, spans = read_workload_steps(md), read_spans(md)
        prof = load_run_profile(run.art / "profile", run.cfg, steps, read_meta(md))
        an = store_analysis(None, name, prof, steps, spans, run.cfg)
        cls = an.tables["comm_classes"]
        assert cls is not None
        for (rank, step), g in cls.groupby(["rank", "step"]):
            got = {c: (int(n), float(b)) for c, n, b in zip(g["comm_class"], g["ops"], g["size_bytes"])}
            assert got.get("tensor_parallel") == (expect[name]["tp"][0], float(expect[name]["tp"][1])), (
                name,
                rank,
                got,
            )
            if name == "dp2tp2":
                assert got.get("expert_dispatch") == (expect[name]["ep"][0], float(expect[name]["ep"][1]))
            assert None not in got, got  # every collective in the profile got a class


# ---------------------------------------------------------------------------------------------- traffic classes


def _co(**cols):
    import pandas as pd

    n = len(next(iter(cols.values())))
    base = {
        "rank": [0] * n,
        "step": [1] * n,
        "op_name": [f"op{i}" for i in range(n)],
        "group": ["g"] * n,
        "op_type": ["allreduce"] * n,
        "start_us": [0.0] * n,
        "elapse_ms": [1.0] * n,
        "size_bytes": [8.0] * n,
    }
    base.update(cols)
    return pd.DataFrame(base)


def test_classes_from_group_kinds_hashed_names_and_op_types():
    from analyzers.analyses.parallel_groups import classify_comm_ops
    from analyzers.groups import double_hash, groups_from_metadata

    # torch_npu's profiler_metadata.json: the communication files name groups by double_hash(group id)
    groups = groups_from_metadata(
        {
            "parallel_group_info": {
                "g1": {"group_name": "tp", "global_ranks": [0, 1]},
                "g2": {"group_name": "dp", "global_ranks": [0, 2]},
                "g3": {"group_name": "exp", "global_ranks": [0, 2]},
                "g4": {"group_name": "pp", "global_ranks": [0, 4]},
                "g5": {"group_name": "cp", "global_ranks": [0, 8]},
            }
        }
    )
    h = {k: str(double_hash(k)) for k in ("g1", "g2", "g3", "g4", "g5")}
    co = _co(
        group=[h["g1"], h["g2"], h["g2"], h["g3"], h["g4"], h["g5"], "unknown", "unknown"],
        op_type=["allreduce", "allreduce", "alltoall", "alltoallv", "broadcast", "allgather", "allreduce", "recv"],
    )
    assert classify_comm_ops(co, groups).tolist() == [
        "tensor_parallel",
        "dp_grad",
        "expert_dispatch",
        "expert_dispatch",
        "pipeline_p2p",
        None,
        None,
        "pipeline_p2p",
    ]
    # without any layout: only point-to-point op types get a class, the rest stays null (no guess)
    assert classify_comm_ops(co, None).tolist() == [None] * 7 + ["pipeline_p2p"]


def test_classes_from_workload_spans_and_declared_sizes():
    import pandas as pd

    from analyzers.analyses.parallel_groups import classify_comm_ops, comm_class_totals

    spans = pd.DataFrame(
        {
            "rank": [0, 0, 1],
            "step": [1, 1, 1],
            "kind": ["allreduce", "forward", "send"],
            "start_ts": [10.0, 0.0, 10.0],
            "end_ts": [11.0, 9.0, 11.0],
        }
    )
    co = _co(
        rank=[0, 0, 0, 0, 1],
        start_us=[10.5e6, 1e6, 2e6, 3e6, 10.2e6],
        size_bytes=[4096.0, 4096.0, 16384.0, 100.0, 4096.0],
    )
    co["comm_class"] = classify_comm_ops(co, None, spans, {"4096": "tensor_parallel", "16384": "expert_dispatch"})
    # inside the gradient all-reduce span: dp_grad, whatever its size; in forward: by declared size; rank 1 sends
    assert co["comm_class"].tolist() == ["dp_grad", "tensor_parallel", "expert_dispatch", None, "pipeline_p2p"]
    t = comm_class_totals(co)
    got = {(r, c): (n, b) for r, c, n, b in zip(t["rank"], t["comm_class"], t["ops"], t["size_bytes"])}
    assert got == {
        (0, "dp_grad"): (1, 4096.0),
        (0, "tensor_parallel"): (1, 4096.0),
        (0, "expert_dispatch"): (1, 16384.0),
        (0, None): (1, 100.0),
        (1, "pipeline_p2p"): (1, 4096.0),
    }


def test_ascend_profile_without_layout_has_null_classes():
    import analyzers
    from analyzers.analyze import analyze
    from tests.support import fixture_path

    p = analyzers.load_profile(fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1"))
    co = analyze(p).tables["comm_ops"]
    assert len(co)
    p2p = co["op_type"].astype(str).str.lower().isin(["send", "recv"])
    assert co.loc[~p2p, "comm_class"].isna().all()
    assert (co.loc[p2p, "comm_class"] == "pipeline_p2p").all()


def test_exposure_by_class_hand_computed():
    import pandas as pd

    from analyzers.analyses.comm_exposure import exposure_by_class

    # step window 0-100 us; compute 0-40 and 60-100; a tp all-reduce 30-50 (10 us under compute, 10 exposed)
    # and one 50-60 (all exposed); an expert collective 70-80 (hidden)
    ops = pd.DataFrame(
        {
            "rank": [0, 0],
            "step": [1, 1],
            "category": ["compute", "compute"],
            "start_us": [0.0, 60.0],
            "dur_us": [40.0, 40.0],
        }
    )
    steps = pd.DataFrame({"rank": [0], "step": [1], "start_us": [0.0], "end_us": [100.0]})
    co = _co(
        start_us=[30.0, 50.0, 70.0],
        elapse_ms=[0.02, 0.01, 0.01],
        comm_class=["tensor_parallel", "tensor_parallel", "expert_dispatch"],
    )
    t = exposure_by_class(ops, steps, co).set_index("comm_class")
    assert t.loc["tensor_parallel", "time_us"] == pytest.approx(30.0)
    assert t.loc["tensor_parallel", "exposed_us"] == pytest.approx(20.0)
    assert t.loc["expert_dispatch", "exposed_us"] == pytest.approx(0.0)


def test_tensor_parallel_advice_share_and_try():
    import pandas as pd

    from analyzers.analyses.advice import CONFIG_KEY
    from analyzers.analyses.advice.tensor_parallel_comm import TP_SHARE, find

    ex = pd.DataFrame(
        {
            "rank": [0, 1, 0],
            "step": [1, 1, 1],
            "comm_class": ["tensor_parallel"] * 2 + ["dp_grad"],
            "time_us": [0.0] * 3,
            "exposed_us": [30_000.0, 50_000.0, 90_000.0],
        }
    )
    steps = pd.DataFrame({"rank": [0, 1], "step": [1, 1], "start_us": [0.0, 0.0], "end_us": [100_000.0, 100_000.0]})
    # 8 ranks: 2 data-parallel replicas already, so tensor_parallel 2 adds no collective and the gain stays the exposed
    # time (without the world size what the knob adds is unknown: null; tests/unit/test_advice_tensor_parallel.py)
    config = {"world_size": 8, "parallel": {"tensor_parallel": 4}}
    rows = find({"comm_exposure_classes": ex, "steps": steps, CONFIG_KEY: config}, {})
    assert len(rows) == 1
    r = rows[0]
    # (30/100 + 50/100) / 2 = 0.40: a finding (> 0.2), not yet high (> 0.4)
    assert r["evidence"].endswith("= 0.40 (> 0.2)") and r["severity"] == "medium"
    assert r["gain_ms"] == pytest.approx(40.0) and r["try"] == {"parallel.tensor_parallel": 2}
    assert "Tensor-parallel all-reduce is 40% of the step" in r["message"] and r["ranks"] == [0, 1]
    small = ex.assign(exposed_us=[TP_SHARE * 100_000.0] * 2 + [0.0])
    assert find({"comm_exposure_classes": small, "steps": steps}, {}) == []


# ---------------------------------------------------------------------------------------------- predict


def test_predict_covers_tensor_parallel_bytes_per_class():
    """predict's per-class collectives for dp2 x tp2 are the hand counts the msrun test checks the runs against."""
    from perfbench.predict.model import predict
    from tests.integration.test_pipeline import EP_MODEL, PP_MODEL
    from tests.unit.test_predict import BW, LAT, cal

    c = cal(workload="moe", model=dict(PP_MODEL, **EP_MODEL))
    r = predict(c, {"world_size": 4, "tensor_parallel": 2, "micro_batches": 2, "batch_size": 8})
    exp = _dp2tp2_expected()
    by = r["collectives"]["by_class"]
    assert (by["tensor_parallel"]["count"], by["tensor_parallel"]["bytes"]) == exp["tp"]
    assert (by["expert_dispatch"]["count"], by["expert_dispatch"]["bytes"]) == exp["ep"]
    # each tp all-reduce over 2 ranks: 2 ring hops x LAT + factor 1 x bytes / BW, all of it exposed
    tp_s = 24 * 2 * LAT + exp["tp"][1] / BW
    assert by["tensor_parallel"]["time_s"] == pytest.approx(tp_s)
    no_tp = predict(c, {"world_size": 4, "tensor_parallel": 1, "micro_batches": 2, "batch_size": 8})
    assert "tensor_parallel" not in no_tp["collectives"]["by_class"]
    assert r["settings"]["tensor_parallel"] == 2
    # the gradient all-reduce runs over D = 4 / (1 x 2) = 2 replicas, the tensors split over the 2 slices
    assert by["dp_grad"]["bytes"] == pytest.approx(sum(c.tensor_bytes) / 2)
    with pytest.raises(Exception, match="not a multiple of pipeline_stages=1 x tensor_parallel=3"):
        predict(c, {"world_size": 4, "tensor_parallel": 3})


def test_show_lists_traffic_classes_per_rank_step():
    import pandas as pd

    from perfbench.views.run_numbers import traffic_classes

    cls = pd.DataFrame(
        {
            "rank": [0, 1, 0, 1],
            "step": [1, 1, 1, 1],
            "comm_class": ["tensor_parallel", "tensor_parallel", None, "dp_grad"],
            "ops": [24, 24, 1, 2],
            "elapse_ms": [30.0, 50.0, 1.0, 4.0],
            "size_bytes": [96.0, 96.0, 8.0, 16.0],
        }
    )
    ex = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [1, 1],
            "comm_class": ["tensor_parallel"] * 2,
            "time_us": [30e3, 50e3],
            "exposed_us": [10e3, 20e3],
        }
    )
    t = traffic_classes(cls, ex).set_index("comm_class")
    assert list(t.index) == ["tensor_parallel", "dp_grad", "unclassified"]  # by time
    assert t.loc["tensor_parallel", "elapse_ms"] == 40.0 and t.loc["tensor_parallel", "exposed_us"] == 15e3
    assert t.loc["unclassified", "ops"] == 1
