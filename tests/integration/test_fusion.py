"""comm_fusion: bucket planning (no MindSpore) and its effect in real 2-rank msrun profiles."""

from __future__ import annotations

import pytest

from perfbench.errors import ConfigError
from tests.integration.test_workload_resnet50 import MID_MB, resnet_runs  # noqa: F401  (session fixture)
from workloads.parallel.bucketing import parse_fusion, plan_buckets

MB = 1024 * 1024


def test_plan_buckets_follows_the_setting():
    sizes = [MB // 2, MB // 4, MB // 4, 3 * MB, MB // 8]
    assert plan_buckets(sizes, 0) == [[4], [3], [2], [1], [0]]
    assert plan_buckets(sizes, "all") == [[4, 3, 2, 1, 0]]
    b1 = plan_buckets(sizes, 1)
    # reverse order, every tensor exactly once, no bucket above 1 MB unless it is one oversized tensor
    assert sorted(i for b in b1 for i in b) == list(range(5))
    assert [i for b in b1 for i in b] == [4, 3, 2, 1, 0]
    for b in b1:
        assert sum(sizes[i] for i in b) <= MB or len(b) == 1
    assert len(plan_buckets(sizes, 0)) > len(b1) > len(plan_buckets(sizes, "all"))
    assert plan_buckets([], "all") == []


@pytest.mark.parametrize("bad", [-1, "lots", float("nan"), True, None])
def test_bad_fusion_setting_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="comm_fusion"):
        parse_fusion(bad)


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_bigger_buckets_give_fewer_collectives_in_the_profile(resnet_runs):  # noqa: F811
    resnet_runs.prefetch("pb0", "pbmid")
    runs = {n: resnet_runs.get(n) for n in ("pb0", "pbmid", "pball")}
    per_step = {}
    for name, run in runs.items():
        meta = run.meta(0)
        for rank in (0, 1):
            counted = {s["collectives"] for s in run.steps(rank)}
            seen = run.allreduces_per_step(rank)
            # what the profiler saw per step is what the runner counted and what the bucket plan said
            assert counted == {meta["collectives_per_step"]}
            assert seen == meta["collectives_per_step"], (name, rank, seen, meta["collectives_per_step"])
            # every gradient element goes through exactly one AllReduce
            assert sum(run.allreduce_numels(rank)) == meta["params"]
        per_step[name] = meta["collectives_per_step"]
        assert {s["comm_bytes"] for s in run.steps(0)} == {meta["params"] * 4}
    tensors = runs["pb0"].meta(0)["param_tensors"]
    assert per_step["pb0"] == tensors
    assert per_step["pball"] == 1
    assert per_step["pb0"] > per_step["pbmid"] > per_step["pball"]
    # the buckets' sizes follow the setting: none above MID_MB except single oversized tensors
    mid = runs["pbmid"]
    tensor_numels = set(runs["pb0"].allreduce_numels(0))  # pb0: one AllReduce per tensor
    mid_sizes = mid.allreduce_numels(0)
    for n in mid_sizes:
        assert n * 4 <= MID_MB * 1024 * 1024 or n in tensor_numels
    assert max(mid_sizes) * 4 > MID_MB * 1024 * 1024 / 2  # buckets are filled, not one tensor each
    assert runs["pball"].allreduce_numels(0) == [runs["pball"].meta(0)["params"]]


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_mindspore_native_fusion(resnet_runs):  # noqa: F811
    msall = resnet_runs.get("msall")
    pb0 = resnet_runs.get("pb0")
    meta = msall.meta(0)
    assert meta["fusion_impl_used"] == "mindspore"
    assert meta["mindspore_comm_fusion"]["allreduce"]["mode"] == "size"
    for rank in (0, 1):
        assert sum(msall.allreduce_numels(rank)) == meta["params"]  # every gradient element, once
    # MindSpore fused the 53 per-parameter AllReduces (pb0 shows one per tensor) into one
    assert pb0.allreduces_per_step(0) == meta["param_tensors"]
    assert msall.allreduces_per_step(0) == 1
    # loss goes down with MindSpore's own reducer too
    l0 = [s["loss"] for s in msall.steps(0)]
    assert sum(l0[-4:]) / 4 < 0.8 * sum(l0[:4]) / 4


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_the_cpu_analyzer_sizes_fused_collectives_from_all_their_inputs(resnet_runs):  # noqa: F811
    """A MindSpore-fused AllReduce takes one input per gradient; perfbench's parser must count them all."""
    import pandas as pd

    from analyzers.parsers.cpu import parse

    for name in ("msall", "pball", "pb0"):
        run = resnet_runs.get(name)
        meta = run.meta(0)
        steps = pd.DataFrame([dict(s) for r in (0, 1) for s in run.steps(r)])
        profile = parse(run.profile_dirs()[0].parent, workload_steps=steps, meta={"world_size": 2})
        per_step = profile.comm_ops.groupby(["rank", "step"])["size_bytes"].sum()
        assert len(per_step) and (per_step == meta["params"] * 4).all(), (name, per_step.to_dict())
