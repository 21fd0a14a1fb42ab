"""Pipeline parallelism: schedules (pure), partitioning and rules (pure), and real msrun runs of the MoE LM
split into 2 stages (GPipe and 1F1B) over Broadcast-pair point-to-point, checked against one process."""

from __future__ import annotations

import copy
import json
import math
import threading
from pathlib import Path

import pandas as pd
import pytest

from analyzers.analyses.pipeline import ideal_bubble_fraction, pipeline_bubbles
from workloads.parallel.layout_math import partition
from workloads.parallel.rules import stage_layout, validate_parallel
from workloads.parallel.schedules import Action, link_events, schedule, simulate

# ---------------------------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_schedules_match_on_every_link_and_never_deadlock(name):
    for S in range(1, 6):
        for M in range(1, 9):
            plans = [schedule(name, S, M, s) for s in range(S)]
            for s in range(S - 1):
                assert link_events(plans[s], "next") == link_events(plans[s + 1], "prev"), (name, S, M, s)
            simulate(name, S, M)  # raises on deadlock
            for p in plans:
                assert sorted(a.mb for a in p if a.op == "forward") == list(range(M))
                assert sorted(a.mb for a in p if a.op == "backward") == list(range(M))


@pytest.mark.parametrize(
    "name,S,M",
    [
        (name, S, M)
        for name in ("gpipe", "1f1b")
        for S, M in [(2, 1), (2, 4), (3, 3), (4, 8), (5, 2)]
        if not (name == "1f1b" and M < S)
    ],
)  # 1F1B needs M >= S (rules)
def test_simulated_bubble_equals_ideal_with_equal_stage_costs(name, S, M):
    res = simulate(name, S, M, t_fwd=1.0, t_bwd=2.0)
    for b in res["bubble_fraction"]:
        assert b == pytest.approx(ideal_bubble_fraction(S, M), abs=1e-9)


def _max_in_flight(plan):
    live = peak = 0
    for a in plan:
        if a.op == "forward":
            live += 1
            peak = max(peak, live)
        elif a.op == "backward":
            live -= 1
    return peak


def test_1f1b_bounds_activations_in_flight_gpipe_does_not():
    S, M = 4, 8
    for s in range(S):
        assert _max_in_flight(schedule("gpipe", S, M, s)) == M
        assert _max_in_flight(schedule("1f1b", S, M, s)) == S - s


def test_simulator_detects_the_blocking_1f1b_deadlock():
    """1F1B written with separate blocking send/recv (no combined exchange) deadlocks under rendezvous p2p."""
    S, M = 2, 4
    plans = []
    for s in range(S):
        plan = []
        for a in schedule("1f1b", S, M, s):
            if a.op == "send_fwd_recv_bwd":
                plan += [Action("send_fwd", a.mb), Action("recv_bwd", a.mb2)]
            elif a.op == "send_bwd_recv_fwd":  # naive order: send my gradient first
                plan += [Action("send_bwd", a.mb), Action("recv_fwd", a.mb2)]
            else:
                plan.append(a)
        plans.append(plan)
    with pytest.raises(RuntimeError, match="deadlocks"):
        simulate("1f1b", S, M, plans=plans)


# ---------------------------------------------------------------------------------------------- partition


def test_partition_minimizes_the_largest_stage():
    assert partition([0.25, 1, 1, 0.5], 2) == [(0, 2), (2, 4)]
    assert partition([1] * 6, 3) == [(0, 2), (2, 4), (4, 6)]
    assert partition([5, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]
    bounds = partition([3, 1, 4, 1, 5, 9, 2, 6], 3)
    assert bounds[0][0] == 0 and bounds[-1][1] == 8 and all(a < b for a, b in bounds)
    with pytest.raises(ValueError):
        partition([1, 1], 3)


def test_stage_layout_is_stage_major():
    assert [stage_layout(r, 4, 2) for r in range(4)] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]


# ---------------------------------------------------------------------------------------------- rules

MOE = {
    "vocab_size": 64,
    "seq_len": 8,
    "hidden_size": 16,
    "num_layers": 2,
    "num_heads": 2,
    "num_experts": 4,
    "top_k": 2,
    "capacity_factor": 1.25,
    "aux_loss_coef": 0.01,
}


def _par(**kw):
    p = {
        "grad_compression": "none",
        "comm_fusion": 0,
        "fusion_impl": "perfbench",
        "pipeline_stages": 1,
        "micro_batches": 1,
        "pipeline_schedule": "1f1b",
    }
    p.update(kw)
    return p


def test_rules_accept_valid_combinations():
    assert validate_parallel("moe", MOE, _par(pipeline_stages=2, micro_batches=4), 2) == []
    assert validate_parallel("moe", MOE, _par(pipeline_stages=2, micro_batches=1, pipeline_schedule="gpipe"), 4) == []
    assert validate_parallel("moe", MOE, _par(micro_batches=4), 4, train_cfg={"batch_size": 8}) == []


@pytest.mark.parametrize(
    "par,ws,train,needle",
    [
        (_par(pipeline_stages=3), 4, None, "pipeline_stages=3 does not divide world_size=4"),
        (_par(pipeline_stages=2, micro_batches=1), 2, None, "micro_batches=1 is less than parallel.pipeline_stages=2"),
        (_par(pipeline_stages=5, micro_batches=8), 5, None, "more than the 4 layers"),
        (
            _par(micro_batches=3),
            1,
            {"batch_size": 8},
            "train.batch_size=8 is not divisible by parallel.micro_batches=3",
        ),
        (_par(pipeline_schedule="zigzag"), 1, None, "pipeline_schedule must be one of gpipe, 1f1b, got 'zigzag'"),
        (_par(pipeline_stages=0), 1, None, "pipeline_stages must be a positive integer, got 0"),
        (_par(), 3, None, "model.num_experts=4 is not divisible by the expert-parallel size 3"),
        (_par(fusion_impl="mindspore"), 2, None, "fusion_impl='mindspore' is not supported for workload moe"),
        (_par(pipeline_stages=2, micro_batches=2, grad_compression="fp16"), 4, None, "grad_compression='fp16'"),
    ],
)
def test_rules_name_the_key_and_value(par, ws, train, needle):
    errs = validate_parallel("moe", MOE, par, ws, train_cfg=train)
    assert any(needle in e for e in errs), errs


def test_rules_moe_model_keys():
    bad = dict(MOE, top_k=5, hidden_size=15)
    errs = validate_parallel("moe", bad, _par(), 1)
    assert any("model.top_k=5 is more than model.num_experts=4" in e for e in errs)
    assert any("model.hidden_size=15 is not divisible by model.num_heads=2" in e for e in errs)
    errs = validate_parallel("moe", {k: v for k, v in MOE.items() if k != "top_k"}, _par(), 1)
    assert errs == ["model.top_k is missing for workload moe"]


def test_rules_resnet_pipeline_accepted():
    # resnet50 runs pipelines and accumulation (tests/integration/test_resnet_pipeline.py)
    assert validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(pipeline_stages=2, micro_batches=2), 2) == []
    assert validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(micro_batches=2), 2) == []
    assert validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(), 2) == []
    errs = validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(pipeline_stages=7, micro_batches=8), 7)
    assert any("pipeline_stages=7 is more than the 6 layers" in e for e in errs), errs


# ---------------------------------------------------------------------------------------------- real runs

ROOT = Path(__file__).resolve().parents[2]

# aux_loss_coef 0 and capacity_factor 2 (= E/k: no expert can overflow) make the result independent of
# how the batch is cut into micro-batches, so every run below must follow the same loss curve.
PP_MODEL = dict(MOE, capacity_factor=2.0, aux_loss_coef=0.0)
BASE = {
    "run_id": "pp",
    "workload": "moe",
    "world_size": 2,
    "repeat": 0,
    "output_dir": "",
    "threads_per_rank": 1,
    "model": PP_MODEL,
    "train": {
        "batch_size": 8,
        "steps": 4,
        "warmup_steps": 1,
        "seed": 0,
        "lr": 0.05,
        "momentum": 0.9,
        "mode": "graph",
        "data": "synthetic",
    },
    "profile": {"enabled": False, "steps": 0},
    "parallel": _par(),
    "inject": {"crash_rank": None, "crash_step": None, "hang_rank": None, "hang_step": None, "delay_ms": 0},
}
# name -> (world_size, parallel overrides, model overrides); msrun's master port is
# chosen free at launch time.
# All four are launched together, once per session (test_moe.py uses "ep2"): msrun start-up is latency.
# Pairs that must train identically: ref (1 process) == gpipe (2 stages); ep2 (2 expert-parallel replicas,
# AllGather dispatch) == 1f1b (2 stages x 2 replicas = 4 ranks, experts sharded per stage, AllReduce dispatch).
EP_MODEL = {"capacity_factor": 1.0, "aux_loss_coef": 0.01}  # tight capacity (drops) and the aux loss on
PP_SPECS = {
    "ref": (1, {"pipeline_stages": 1, "micro_batches": 1}, {}),
    "gpipe": (2, {"pipeline_stages": 2, "micro_batches": 4, "pipeline_schedule": "gpipe"}, {}),
    "1f1b": (4, {"pipeline_stages": 2, "micro_batches": 2, "pipeline_schedule": "1f1b"}, EP_MODEL),
    "ep2": (2, {"pipeline_stages": 1, "micro_batches": 2}, EP_MODEL),
}
_RUNS: dict = {}
_RUNS_LOCK = threading.Lock()


def moe_runs(tmp_path_factory) -> dict:
    """Launch every PP_SPECS run concurrently on first use; later calls return the same runs."""
    with _RUNS_LOCK:
        if not _RUNS:
            out = tmp_path_factory.mktemp("moe_runs")

            def go(name):
                ws, par, model = PP_SPECS[name]
                _RUNS[name] = launch_moe(out, name, ws, par, model=model)

            threads = [threading.Thread(target=go, args=(n,)) for n in PP_SPECS]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        return _RUNS


class PPRun:
    def __init__(self, cfg, art: Path, res):
        self.cfg, self.art, self.res = cfg, art, res

    def _jsonl(self, name):
        p = self.art / "metrics" / name
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def steps(self, rank):
        return self._jsonl(f"rank{rank}.steps.jsonl")

    def spans(self):
        return pd.DataFrame([r for k in range(self.cfg["world_size"]) for r in self._jsonl(f"rank{k}.spans.jsonl")])

    def meta(self, rank):
        return json.loads((self.art / "metrics" / f"rank{rank}.meta.json").read_text())


def launch_moe(out: Path, name: str, ws: int, parallel: dict, model=None, train=None) -> PPRun:
    cfg = copy.deepcopy(BASE)
    cfg.update(run_id=name, world_size=ws, output_dir=str(out / name / "artifacts"))
    cfg["parallel"].update(parallel)
    if model:
        cfg["model"] = dict(cfg["model"], **model)
    if train:
        cfg["train"].update(train)
    return launch_run(cfg, timeout_s=300)


def launch_run(cfg: dict, timeout_s: float) -> PPRun:
    """Write cfg as the run's run_config.json and run it through perfbench's msrun launcher."""
    from perfbench.run import launcher

    art = Path(cfg["output_dir"])
    art.mkdir(parents=True, exist_ok=True)
    path = art / "run_config.json"
    path.write_text(json.dumps(cfg, indent=1))
    res = launcher.launch(
        path,
        cfg,
        {"master_port": "auto", "bind_core": "auto", "timeout_s": timeout_s, "stall_timeout_s": 150},
        skip_teardown=True,  # as test_workload_resnet50.launch: no wait for MindSpore's teardown of a finished run
    )
    return PPRun(cfg, art, res)


@pytest.fixture
def pp_runs(tmp_path_factory):
    runs = moe_runs(tmp_path_factory)
    for name in PP_SPECS:
        assert name in runs and runs[name].res.status == "ok", (
            f"{name}: {runs[name].res.reason}\n{runs[name].res.log_tail}"
        )
    return runs


def _losses(run, rank):
    return [s["loss"] for s in run.steps(rank)]


@pytest.mark.msrun
@pytest.mark.timeout(480)
def test_two_stage_pipeline_trains_like_one_process(pp_runs):
    ref = _losses(pp_runs["ref"], 0)
    assert all(math.isfinite(v) for v in ref)
    gp = pp_runs["gpipe"]
    for rank in (0, 1):
        # same math, other summation order: the whole curve (4 optimizer steps) agrees
        assert _losses(gp, rank) == pytest.approx(ref, rel=2e-4, abs=2e-5), (rank, _losses(gp, rank), ref)
    # only the last stage counts samples (tokens); the global number equals the one-process run
    assert all(s["samples"] == 0 for s in gp.steps(0))
    assert [s["samples"] for s in gp.steps(1)] == [s["samples"] for s in pp_runs["ref"].steps(0)]
    m0, m1 = gp.meta(0), gp.meta(1)
    assert (m0["stage"], m1["stage"]) == (0, 1)
    assert m0["p2p_impl"] == "broadcast-pair"
    assert m0["stage_layers"][1] == m1["stage_layers"][0]


@pytest.mark.msrun
@pytest.mark.timeout(480)
def test_pipeline_with_expert_parallel_replicas_matches_expert_parallel_run(pp_runs):
    """4 ranks = 2 stages x 2 replicas (1F1B) against 2 ranks holding the whole model: same losses, and each
    replica's expert counts split exactly over its two stages (one MoE layer each)."""
    pp, ep = pp_runs["1f1b"], pp_runs["ep2"]
    ref = _losses(ep, 0)
    for rank in range(4):
        assert _losses(pp, rank) == pytest.approx(ref, rel=2e-4, abs=2e-5), (rank, _losses(pp, rank), ref)
    assert [pp.meta(r)["stage"] for r in range(4)] == [0, 0, 1, 1]
    assert pp.meta(0)["expert_comm"] == "allreduce+allreduce" and ep.meta(0)["expert_comm"] == "allgather+allreduce"
    for d in (0, 1):
        for a, b, whole in zip(pp.steps(d), pp.steps(2 + d), ep.steps(d)):
            assert [x + y for x, y in zip(a["tokens_per_expert"], b["tokens_per_expert"])] == whole["tokens_per_expert"]
            assert a["dropped_tokens"] + b["dropped_tokens"] == whole["dropped_tokens"]
            assert a["samples"] == 0 and b["samples"] == whole["samples"]


@pytest.mark.msrun
@pytest.mark.timeout(480)
def test_two_stage_pipeline_spans_and_measured_bubble(pp_runs):
    for name in ("gpipe", "1f1b"):
        run = pp_runs[name]
        S, M = 2, run.cfg["parallel"]["micro_batches"]
        spans = run.spans()
        for rank in range(run.cfg["world_size"]):
            stage = rank * S // run.cfg["world_size"]
            for step in range(run.cfg["train"]["steps"]):
                sp = spans[(spans.step == step) & (spans["rank"] == rank)]
                assert set(sp.stage.dropna().astype(int)) == {stage}
                for kind in ("forward", "backward"):
                    assert sorted(sp[sp.kind == kind].mb.astype(int)) == list(range(M)), (name, step, rank, kind)
                # every activation and every gradient crosses the link once
                assert len(sp[sp.kind == "send"]) == M and len(sp[sp.kind == "recv"]) == M
                if S * 1 < run.cfg["world_size"]:  # replicas: one gradient all-reduce per step
                    assert len(sp[sp.kind == "allreduce"]) == 1
            if stage == S - 1:
                # the schedule shows in the spans: 1F1B's last stage runs backward(0) before forward(1)
                last = spans[(spans.step == 2) & (spans["rank"] == rank) & spans.kind.isin(["forward", "backward"])]
                order = list(last.sort_values("start_ts").kind)
                assert order[:2] == (["forward", "forward"] if name == "gpipe" else ["forward", "backward"]), order

        table = pipeline_bubbles(None, spans[spans.step >= run.cfg["train"]["warmup_steps"]], run.cfg)
        assert table is not None and set(table.stage) == {0, 1}
        assert (table.bubble_fraction > 0).all() and (table.bubble_fraction < 1).all()
        assert table.ideal_fraction.iloc[0] == pytest.approx((S - 1) / (M + S - 1))
        # the last stage waits for the first one's forwards: it idles for a measurable share of the step
        assert table[table.stage == 1].bubble_fraction.mean() > 0.05
