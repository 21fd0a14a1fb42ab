"""parallel.zero_stage, train.recompute, train.optimizer: shard planning (no MindSpore), config rules, and real
2-rank msrun runs whose losses equal the replicated run's."""

from __future__ import annotations

import pytest

from perfbench.run.config_models import RunConfig
from perfbench.errors import ConfigError
from workloads.parallel.rules import validate_parallel
from workloads.parallel.zero import shard_bytes, shard_owners
from tests.support import background_launches, prefetched


def test_shard_owners_largest_first_onto_the_least_loaded():
    # by hand: order 9 (i1), 5 (i3), 4 (i0), 3 (i2), 1 (i4); loads: 9->r0 ; 5->r1 ; 4->r1 (5<9) ; 3->r1 (9 vs 9: r0)
    #   9 | 5,4 -> r0=9, r1=9 -> 3 goes to r0 (tie: lower rank) -> r0=12 ; 1 -> r1 -> r1=10
    assert shard_owners([4, 9, 3, 5, 1], 2) == [1, 0, 0, 1, 1]
    assert shard_bytes([4, 9, 3, 5, 1], 2) == [12, 10]
    assert shard_owners([7, 7, 7], 3) == [0, 1, 2]
    assert shard_owners([1, 2], 1) == [0, 0]


def _rules(workload="resnet50", ws=2, **par):
    model = {"image_size": 16, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]}
    base = {"pipeline_stages": 1, "micro_batches": 1, "fusion_impl": "perfbench", "grad_compression": "none"}
    base.update(par)
    train = {"batch_size": 8, **base.pop("train", {})}
    return validate_parallel(workload, model, base, ws, train)


def test_zero_and_recompute_rules_name_key_and_value():
    assert _rules(zero_stage=1) == [] and _rules(zero_stage=2, train={"recompute": True}) == []
    for kw, words in [
        ({"ws": 1, "zero_stage": 1}, "world_size=1"),
        ({"zero_stage": 2, "fusion_impl": "mindspore"}, "fusion_impl='mindspore'"),
        ({"zero_stage": 1, "grad_compression": "fp16"}, "grad_compression='fp16'"),
        ({"zero_stage": 1, "micro_batches": 2}, "micro_batches=2"),
    ]:
        (msg,) = _rules(**kw)
        assert f"parallel.zero_stage={kw['zero_stage']}" in msg and words in msg, msg
    (msg,) = [e for e in validate_parallel("moe", {}, {"zero_stage": 1}, 2, {}) if "zero_stage" in e]
    assert "workload moe" in msg
    # both knobs act in PyNative too (in-place eager broadcasts; mindspore.recompute per block)
    assert _rules(zero_stage=2, train={"recompute": True, "mode": "pynative"}) == []
    assert _rules(train={"recompute": True, "mode": "graph"}) == []
    (msg,) = [e for e in validate_parallel("moe", {}, {}, 2, {"recompute": True}) if "recompute" in e]
    assert "train.recompute=true" in msg and "workload moe" in msg


def test_run_config_rejects_impossible_memory_knobs_before_launch():
    ok = dict(
        workload="resnet50",
        world_size=2,
        model={"image_size": 16, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
        train={},
        profile={},
    )
    RunConfig(**ok, parallel={"zero_stage": 2})
    with pytest.raises(Exception, match=r"zero_stage=1 is not supported with world_size=1"):
        RunConfig(**{**ok, "world_size": 1}, parallel={"zero_stage": 1})
    with pytest.raises(Exception, match=r"zero_stage"):
        RunConfig(**ok, parallel={"zero_stage": 3})
    with pytest.raises(Exception, match=r"optimizer"):
        RunConfig(**{**ok, "train": {"optimizer": "sgd"}}, parallel={})


def test_sweep_error_names_the_key(tmp_path):
    from perfbench.run.config import load_config

    p = tmp_path / "s.yaml"
    p.write_text("workload: resnet50\nparallel: {zero_stage: 1}\nsweep: {world_size: [1]}\n")
    with pytest.raises(ConfigError, match=r"zero_stage=1.*world_size=1"):
        load_config(p)


# ---- real msrun: sharded runs train exactly as the replicated one ---------------------------------------

SPECS = {
    "z0": {"parallel": {"zero_stage": 0, "comm_fusion": "all"}},
    "z1": {"parallel": {"zero_stage": 1, "comm_fusion": "all"}},
    "z2r": {"parallel": {"zero_stage": 2, "comm_fusion": 0.1}, "train": {"recompute": True}},  # several buckets
    # PyNative: the same sharded step run eagerly, recompute through mindspore.recompute
    "z1rp": {"parallel": {"zero_stage": 1, "comm_fusion": "all"}, "train": {"recompute": True, "mode": "pynative"}},
}
TRAIN = {"optimizer": "adamw", "lr": 0.001, "steps": 6, "warmup_steps": 1, "weight_decay": 0.01}


#: the recompute test's runs: 2 stages x 2 micro-batches, plain and with recompute in graph and pynative mode
RECOMPUTE = {
    "plain": {},
    "rc_graph": {"recompute": True},
    "rc_pynative": {"recompute": True, "mode": "pynative"},
}


def prefetch_runs(tmp_path_factory) -> dict:
    """The seven launches, started in the background when the session collected this module (tests/conftest.py): its
    tests compare losses, step counts and statuses, not times."""
    with background_launches(*SPECS, *RECOMPUTE):  # their msrun processes run beside the tests before this module's
        return _zero_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def zero_runs(tmp_path_factory):
    return prefetched(__name__, _zero_runs, tmp_path_factory)


def _zero_runs(tmp_path_factory) -> dict:
    """The ZeRO runs (SPECS) and the recompute runs (RECOMPUTE) of this file, seven launches in one pool of two."""
    from tests.integration.test_workload_resnet50 import launch

    out = tmp_path_factory.mktemp("zero")

    def go(name):
        if name in SPECS:
            spec = SPECS[name]
            over = {
                "parallel": dict(spec["parallel"]),
                "train": {**TRAIN, **spec.get("train", {})},
                "profile": {"enabled": False, "steps": 1},
            }
        else:
            over = {
                "parallel": {"pipeline_stages": 2, "micro_batches": 2},
                "train": {**TRAIN, "steps": 4, **RECOMPUTE[name]},
                "profile": {"enabled": False, "steps": 1},
            }
        return launch(out, name, over, timeout_s=480)  # two share the cores

    names = [*SPECS, *RECOMPUTE]
    return dict(zip(names, _two_at_a_time(go, names)))


def _two_at_a_time(fn, names):
    """fn(name) for each name, two launches at a time (as test_workload_resnet50.Runs does): a launch is mostly
    start-up latency (imports, the cluster join, the compile), so two overlap well on 2 cores; these runs compare
    losses, not times, so sharing the cores changes nothing they check."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(fn, names))


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_sharded_adamw_losses_equal_the_replicated_run(zero_runs):
    for name in SPECS:
        run = zero_runs[name]
        assert run.res.status == "ok", f"{name}: {run.res.reason}\n{run.res.log_tail}"
    ref = [s["loss"] for s in zero_runs["z0"].steps(0)]
    assert len(ref) == TRAIN["steps"] and len(set(ref)) == len(ref)  # the weights change every step
    for name in ("z1", "z2r", "z1rp"):
        for rank in (0, 1):
            got = [s["loss"] for s in zero_runs[name].steps(rank)]
            assert got == pytest.approx(
                ref if rank == 0 else [s["loss"] for s in zero_runs["z0"].steps(1)], rel=2e-4, abs=2e-5
            ), (name, rank, got)
    m0, m1 = zero_runs["z1"].meta(0), zero_runs["z1"].meta(1)
    assert m0["optimizer"] == "adamw" and m0["zero_stage"] == 1
    # the two shards partition the parameters
    assert m0["zero_shard_params"] + m1["zero_shard_params"] == m0["params"]
    assert zero_runs["z2r"].meta(0)["recompute"] is True and zero_runs["z1rp"].meta(0)["mode"] == "pynative"
    # one in-place broadcast per parameter tensor, plus the all-reduce buckets (1 with "all", more with 0.1 MB)
    n = m0["param_tensors"]
    assert m0["collectives_per_step"] == n + 1
    assert zero_runs["z2r"].meta(0)["collectives_per_step"] > n + 1


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_recompute_in_the_pipeline_trainer_keeps_the_losses(zero_runs):
    """2 stages x 2 micro-batches: recompute through ms.jit stage functions (graph) and through mindspore.recompute
    (pynative, where cell.recompute() has no effect) trains exactly as without it."""
    losses = {}
    for name, train in RECOMPUTE.items():
        run = zero_runs[name]
        assert run.res.status == "ok", f"{name}: {run.res.reason}\n{run.res.log_tail}"
        assert run.meta(1)["recompute"] is bool(train)
        losses[name] = [s["loss"] for s in run.steps(1)]  # the last stage computes the loss
    assert len(set(losses["plain"])) == 4
    for name in ("rc_graph", "rc_pynative"):
        assert losses[name] == pytest.approx(losses["plain"], rel=2e-4, abs=2e-5), name
