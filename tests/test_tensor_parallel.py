"""Tensor (model) parallelism for the MoE transformer (issue 26): layout rules, groups, collective counts, and
real msrun runs against the single-rank model (workloads/parallel/tensor.py)."""

from __future__ import annotations

import math

import pytest

from tests.test_pipeline import MOE, _par
from workloads.parallel.rules import layout_groups, stage_layout, validate_parallel
from workloads.parallel.tensor import column_slice, qkv_rows

# ---------------------------------------------------------------------------------------------- rules


def test_layout_is_tensor_parallel_innermost():
    # Megatron's order: rank = stage * (D*T) + replica * T + slice
    assert [stage_layout(r, 8, 2, 2) for r in range(8)] == [
        (0, 0, 2), (0, 0, 2), (0, 1, 2), (0, 1, 2), (1, 0, 2), (1, 0, 2), (1, 1, 2), (1, 1, 2)]
    assert [stage_layout(r, 4, 2) for r in range(4)] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]


def test_layout_groups_name_every_dimension():
    # dp2 x tp2: two tensor-parallel pairs of neighbours, two data-parallel groups across them
    assert layout_groups(4, 1, 2) == {"pb_tp_s0_d0": [0, 1], "pb_tp_s0_d1": [2, 3],
                                      "pb_dp_stage0_tp0": [0, 2], "pb_dp_stage0_tp1": [1, 3]}
    # tp2 x pp2: no data parallel; slice t of stage 0 talks to slice t of stage 1
    assert layout_groups(4, 2, 2) == {"pb_tp_s0_d0": [0, 1], "pb_tp_s1_d0": [2, 3],
                                      "pb_p2p_0_2": [0, 2], "pb_p2p_1_3": [1, 3]}
    # dp4: the world group only (named by MindSpore)
    assert layout_groups(4, 1, 1) == {}
    assert layout_groups(4, 2, 1) == {"pb_dp_stage0": [0, 1], "pb_dp_stage1": [2, 3],
                                      "pb_p2p_0_2": [0, 2], "pb_p2p_1_3": [1, 3]}


def test_shards_partition_the_weights():
    # H = 8, T = 2: rank 0 keeps q rows 0-3, k rows 8-11, v rows 16-19; rank 1 the others
    assert qkv_rows(8, 2, 0).tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19]
    assert sorted(qkv_rows(8, 2, 0).tolist() + qkv_rows(8, 2, 1).tolist()) == list(range(24))
    assert column_slice(32, 4, 3) == slice(24, 32)


def test_rules_accept_tensor_parallel_layouts():
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2), 2) == []
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2), 4) == []  # dp2 x tp2
    assert validate_parallel("moe", MOE, _par(tensor_parallel=2, pipeline_stages=2, micro_batches=2), 4) == []


@pytest.mark.parametrize("model,par,ws,needle", [
    ({}, _par(tensor_parallel=4), 4, "parallel.tensor_parallel=4 does not divide model.num_heads=2"),
    (dict(hidden_size=18), _par(tensor_parallel=4), 4,
     "parallel.tensor_parallel=4 does not divide model.hidden_size=18"),
    (dict(ffn_hidden_size=30), _par(tensor_parallel=4), 4, "does not divide the feed-forward size "
                                                              "model.ffn_hidden_size=30"),
    ({}, _par(tensor_parallel=2), 3, "world_size=3 is not a multiple of parallel.pipeline_stages=1 x "
                                     "parallel.tensor_parallel=2"),
    ({}, _par(tensor_parallel=2, pipeline_stages=2, micro_batches=2), 6,
     "world_size=6 is not a multiple of parallel.pipeline_stages=2 x parallel.tensor_parallel=2"),
    ({}, _par(tensor_parallel=0), 2, "parallel.tensor_parallel must be a positive integer, got 0"),
    ({}, _par(tensor_parallel=2, grad_compression="fp16"), 4, "grad_compression='fp16' with parallel.tensor_parallel=2"),
    ({}, _par(tensor_parallel=2, comm_fusion=4), 4, "comm_fusion=4 with parallel.tensor_parallel=2"),
])
def test_rules_reject_tensor_parallel_layouts_naming_key_and_value(model, par, ws, needle):
    errs = validate_parallel("moe", dict(MOE, **model), par, ws)
    assert any(needle in e for e in errs), errs


def test_resnet_tensor_parallel_is_a_config_error():
    errs = validate_parallel("resnet50", {"layers": [1, 1, 1, 1]}, _par(tensor_parallel=2), 2)
    assert errs == ["parallel.tensor_parallel=2: workload resnet50 has no tensor-parallel implementation (only "
                    "'moe' splits its attention heads and feed-forward over ranks); use tensor_parallel=1"]
