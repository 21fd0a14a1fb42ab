"""The config rules across keys at their boundaries, in process (fast; `make mutation` mutates them).

Each case is one side of one boundary: the value just allowed passes, the next one is rejected with one
line naming the key(s) and value(s). Expected messages are written out by hand from the rule (what a user
reads), not taken from the code. The run's settings follow in parentheses when a rule breaks for one run.
"""

from __future__ import annotations

import pytest

from perfbench.run.config import parse_config
from perfbench.errors import ConfigError

RESNET = {
    "workload": "resnet50",
    "train": {"batch_size": 8, "steps": 10, "warmup_steps": 2},
    "profile": {"enabled": True, "steps": 4},
}
MOE = {
    "workload": "moe",
    "train": {"batch_size": 8, "steps": 10, "warmup_steps": 2},
    "profile": {"steps": 4},
    "model": {"num_layers": 2, "num_experts": 4, "top_k": 2, "hidden_size": 64, "num_heads": 4},
}


def conf(base=RESNET, **sections):
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values} if isinstance(values, dict) and name != "sweep" else values
    return raw


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    msg = str(exc.value)
    assert "\n" not in msg, msg
    return msg


def ok(raw):
    return parse_config(raw)


# ---- warm-up, measured and profiled steps --------------------------------------------------------------


def test_warmup_equal_to_steps_is_rejected_with_profiling_off():
    off = {"enabled": False, "steps": 4}
    assert error_of(conf(train={"steps": 5, "warmup_steps": 5}, profile=off)) == (
        "train.warmup_steps (5) must be less than train.steps (5) so that some steps are measured (run world_size=1)"
    )
    assert ok(conf(train={"steps": 5, "warmup_steps": 4}, profile=off)).train["warmup_steps"] == 4
    # one more warm-up step than steps: the same rule, with the values
    assert error_of(conf(train={"steps": 5, "warmup_steps": 6}, profile=off)).startswith(
        "train.warmup_steps (6) must be less than train.steps (5)"
    )


def test_profiled_window_must_fit_after_warmup():
    assert ok(conf(train={"steps": 6, "warmup_steps": 2}, profile={"steps": 4})).profile["steps"] == 4
    assert error_of(conf(train={"steps": 6, "warmup_steps": 2}, profile={"steps": 5})) == (
        "profile.steps (5) does not fit after train.warmup_steps (2) within train.steps (6) (run world_size=1)"
    )
    # with the profiler off its window does not count
    assert ok(conf(train={"steps": 6, "warmup_steps": 2}, profile={"enabled": False, "steps": 5}))


# ---- world size, pipeline stages and micro-batches -------------------------------------------------------


def test_pipeline_stages_must_divide_world_size():
    par = {"pipeline_stages": 2, "micro_batches": 2}
    assert len(ok(conf(parallel=par, sweep={"world_size": [2, 4]})).plan("s")) == 2
    assert error_of(conf(parallel=par, sweep={"world_size": [3]})) == (
        "parallel.pipeline_stages=2 does not divide world_size=3 (world_size = pipeline_stages x data-parallel size) "
        "(run world_size=3)"
    )


@pytest.mark.parametrize("schedule,mbs,good", [("1f1b", 2, True), ("1f1b", 1, False), ("gpipe", 1, True)])
def test_1f1b_needs_a_micro_batch_per_stage(schedule, mbs, good):
    raw = conf(
        parallel={"pipeline_stages": 2, "micro_batches": mbs, "pipeline_schedule": schedule}, sweep={"world_size": [2]}
    )
    if good:
        assert ok(raw).parallel["micro_batches"] == mbs
    else:
        assert error_of(raw) == (
            "parallel.micro_batches=1 is less than parallel.pipeline_stages=2: 1F1B needs at "
            "least one micro-batch per stage (use micro_batches >= 2 or pipeline_schedule='gpipe') "
            "(run world_size=2)"
        )


def test_one_stage_takes_any_micro_batch_count_that_divides_the_batch():
    assert ok(conf(parallel={"micro_batches": 8})).parallel["micro_batches"] == 8  # gradient accumulation
    assert error_of(conf(parallel={"micro_batches": 3})) == (
        "train.batch_size=8 is not divisible by parallel.micro_batches=3 (run world_size=1)"
    )


def test_world_size_bounds():
    assert ok(conf(sweep={"world_size": [8]}, launch={"max_world_size": 8}))
    assert error_of(conf(sweep={"world_size": [9]}, launch={"max_world_size": 8})).startswith(
        "sweep.world_size: 9 is larger than allowed: launch.max_world_size is 8 (raise launch.max_world_size"
    )
    assert error_of(conf(sweep={"world_size": [0]})) == "sweep.world_size: 0 must be an integer, at least 1"
    assert error_of(conf(sweep={"world_size": [True]})) == "sweep.world_size: true must be an integer, at least 1"
    assert error_of(conf(sweep={"world_size": [2.0]})) == "sweep.world_size: 2.0 must be an integer, at least 1"
    assert ok(conf(sweep={"world_size": [4]}, launch={"nodes": 2}))
    assert error_of(conf(sweep={"world_size": [3]}, launch={"nodes": 2})) == (
        "sweep.world_size: 3 is not divisible by launch.nodes (2)"
    )


def test_world_size_without_a_sweep_is_named_without_the_sweep_prefix():
    from perfbench.run.config import plan_point

    cfg = ok(conf(launch={"max_world_size": 4}))
    assert plan_point(cfg, {"world_size": 4}, "p").settings["world_size"] == 4
    with pytest.raises(ConfigError) as exc:
        plan_point(cfg, {"world_size": 5}, "p")
    assert str(exc.value).startswith("world_size: 5 is larger than allowed: launch.max_world_size is 4")


def test_stages_up_to_the_resnet_layers():
    # layers [1, 1, 1, 1]: 4 blocks + stem + head = 6 units
    model = {"layers": [1, 1, 1, 1]}
    par = {"pipeline_stages": 6, "micro_batches": 6}
    assert ok(conf(model=model, parallel=par, train={"batch_size": 6}, sweep={"world_size": [6]}))
    assert error_of(
        conf(
            model=model,
            parallel={"pipeline_stages": 7, "micro_batches": 7},
            train={"batch_size": 7},
            sweep={"world_size": [7]},
        )
    ) == (
        "parallel.pipeline_stages=7 is more than the 6 layers workload resnet50 can be split into "
        "(the blocks in model.layers + 2 (stem, head)) (run world_size=7)"
    )


def test_fusion_by_mindspore_excludes_compression():
    assert ok(conf(parallel={"fusion_impl": "mindspore"}))
    assert ok(conf(parallel={"grad_compression": "fp16"}))
    assert error_of(conf(parallel={"fusion_impl": "mindspore", "grad_compression": "fp16"})) == (
        "parallel.fusion_impl='mindspore' fuses MindSpore's own gradient all-reduce and cannot be combined with "
        "parallel.grad_compression='fp16' (use fusion_impl='perfbench') (run world_size=1)"
    )


# ---- MoE ---------------------------------------------------------------------------------------------------


def test_moe_stages_up_to_the_layers():
    """The partitioner splits embedding + num_layers blocks + head (num_layers + 2 units), so a 2-block MoE runs 3
    stages; config validation applies the partitioner's rule (up to num_layers + 2 stages), not num_layers."""
    from workloads.parallel.layout_math import partition

    par = {"pipeline_stages": 2, "micro_batches": 2}
    assert ok(conf(MOE, parallel=par, sweep={"world_size": [2]}))
    # num_layers=1: embedding, block, head = 3 units; the MoE workload's own costs (workloads/moe/__init__.py)
    costs = [0.25] + [1.0] * 1 + [0.5]
    assert partition(costs, 3) == [(0, 1), (1, 2), (2, 3)]
    par3 = {"pipeline_stages": 3, "micro_batches": 4}
    assert ok(
        conf(
            MOE,
            model={"num_layers": 1, "num_experts": 3},
            train={"batch_size": 8},
            parallel=par3,
            sweep={"world_size": [3]},
        )
    )
    with pytest.raises(ValueError):
        partition(costs, 4)
    par4 = {"pipeline_stages": 4, "micro_batches": 4}
    assert error_of(conf(MOE, model={"num_layers": 1}, parallel=par4, sweep={"world_size": [4]})) == (
        "parallel.pipeline_stages=4 is more than the 3 layers workload moe can be split into "
        "(model.num_layers + 2 (embedding, blocks, head)) (run world_size=4)"
    )


def test_moe_example_with_three_stages_is_valid():
    """The issue's case: examples/moe.yaml (num_layers 2) with pipeline_stages 3 (4 units: 3 stages fit)."""
    import yaml

    from tests.support import ROOT

    raw = yaml.safe_load((ROOT / "examples" / "moe.yaml").read_text())
    assert raw["model"]["num_layers"] == 2
    raw["parallel"] = {**raw.get("parallel", {}), "pipeline_stages": 3, "micro_batches": 4}
    raw["train"] = {**raw.get("train", {}), "batch_size": 8}
    raw["sweep"] = {"world_size": [3]}
    assert ok(raw).parallel["pipeline_stages"] == 3


def test_moe_top_k_up_to_the_experts():
    assert ok(conf(MOE, model={"top_k": 4, "num_experts": 4}))
    assert error_of(conf(MOE, model={"top_k": 5, "num_experts": 4})) == (
        "model.top_k=5 is more than model.num_experts=4 (run world_size=1)"
    )


def test_moe_heads_divide_the_hidden_size():
    assert ok(conf(MOE, model={"hidden_size": 48, "num_heads": 3}))
    assert error_of(conf(MOE, model={"hidden_size": 50, "num_heads": 4})) == (
        "model.hidden_size=50 is not divisible by model.num_heads=4 (run world_size=1)"
    )


def test_moe_experts_divide_over_the_data_parallel_ranks():
    assert ok(conf(MOE, model={"num_experts": 4}, sweep={"world_size": [1, 2, 4]}))
    assert ok(conf(MOE, model={"num_experts": 3, "top_k": 2}))  # one rank holds any number of experts
    assert error_of(conf(MOE, model={"num_experts": 3, "top_k": 2}, sweep={"world_size": [2]})) == (
        "model.num_experts=3 is not divisible by the expert-parallel size 2 (world_size / (parallel.pipeline_stages "
        "x parallel.tensor_parallel)): "
        "every rank must own the same number of experts (run world_size=2)"
    )
    # the data-parallel size is world_size / stages: 4 ranks in 2 stages hold the 6 experts 2 ways
    par = {"pipeline_stages": 2, "micro_batches": 2}
    assert ok(conf(MOE, model={"num_experts": 6, "top_k": 2}, parallel=par, sweep={"world_size": [4]}))
    assert error_of(conf(MOE, model={"num_experts": 6, "top_k": 2}, parallel=par, sweep={"world_size": [8]})) == (
        "model.num_experts=6 is not divisible by the expert-parallel size 4 (world_size / (parallel.pipeline_stages "
        "x parallel.tensor_parallel)): "
        "every rank must own the same number of experts (run world_size=8)"
    )


# ---- launch and range rules ----------------------------------------------------------------------------


def test_node_rank_below_nodes():
    assert ok(conf(launch={"nodes": 2, "node_rank": 1}, sweep={"world_size": [2]}))
    assert error_of(conf(launch={"nodes": 2, "node_rank": 2}, sweep={"world_size": [2]})) == (
        "launch.node_rank: 2 must be at most 1 (launch.nodes is 2)"
    )


@pytest.mark.parametrize(
    "rng,msg",
    [
        ({"low": 0.1, "high": 0.1}, "sweep.lr.high: 0.1 must be greater than low (0.1)"),
        ({"low": 0.2, "high": 0.1}, "sweep.lr.high: 0.1 must be greater than low (0.2)"),
        (
            {"low": 0.01, "high": 0.1, "log": True, "step": 0.01},
            "sweep.lr: `log: true` and `step` cannot be combined (a log range is sampled on a log scale)",
        ),
        ({"low": 0, "high": 0.1, "log": True}, "sweep.lr.low: 0 must be greater than 0 with `log: true`"),
        ({"low": -0.1, "high": 0.1, "log": True}, "sweep.lr.low: -0.1 must be greater than 0 with `log: true`"),
        ({"high": 0.1}, 'sweep.lr: a range needs `low` and `high` (got {"high": 0.1})'),
        ({"low": 0.1}, 'sweep.lr: a range needs `low` and `high` (got {"low": 0.1})'),
    ],
)
def test_range_rules(rng, msg):
    assert error_of(conf(sweep={"lr": rng})) == msg


def test_ranges_just_inside_the_rules():
    c = ok(conf(sweep={"lr": {"low": 0.1, "high": 0.3, "step": 0.1}}))
    assert c.sweep["lr"] == [0.1, 0.2, 0.3]
    assert ok(conf(sweep={"lr": {"low": 1e-4, "high": 0.1, "log": True}})).ranges["lr"].log
    assert ok(conf(sweep={"lr": {"low": 0, "high": 0.1}})).ranges["lr"].low == 0  # 0 is fine without log
    assert ok(conf(sweep={"warmup_steps": {"low": 1, "high": 3}})).sweep["warmup_steps"] == [1, 2, 3]


# ---- the first problem is reported, unknown keys first -------------------------------------------------


def test_unknown_key_comes_before_other_problems():
    msg = error_of(conf(train={"batch_size": 0, "step": 3}))
    assert msg.startswith("train.step: unknown key (did you mean `steps`?) (value 3; allowed: batch_size, steps,")


def test_missing_workload_lists_the_choices():
    assert error_of({"train": {"steps": 3}}) == "missing key `workload` (one of: resnet50, moe, script)"


def test_bad_values_read_with_key_value_and_bound():
    assert error_of(conf(train={"batch_size": 0})) == "train.batch_size: 0 must be at least 1"
    assert error_of(conf(train={"momentum": 1.0})) == "train.momentum: 1.0 must be below 1.0"
    assert error_of(conf(model={"layers": [3, 4]})) == (
        "model.layers: [3, 4] must be a list of 4 positive integers (blocks per stage, ResNet-50 is [3, 4, 6, 3])"
    )
    assert error_of(conf(train={"data": "/no/such/folder"})) == (
        "train.data: '/no/such/folder' must be `synthetic` or an existing image folder"
    )
    assert error_of(conf(parallel={"compression_ratio": 0})) == (
        "parallel.compression_ratio: 0 must be in (0, 1]: the fraction of gradient bytes kept"
    )


def test_an_image_folder_is_a_valid_data_source(tmp_path):
    assert ok(conf(train={"data": str(tmp_path)})).train["data"] == str(tmp_path)


def test_rules_of_the_parallel_code_apply_too():
    """workloads/parallel/rules.py adds rules of its own after these: compression runs on the world group."""
    par = {"grad_compression": "fp16", "pipeline_stages": 2, "micro_batches": 2}
    assert ok(conf(parallel=par, sweep={"world_size": [2]}))  # one replica per stage: fine
    assert error_of(conf(parallel=par, sweep={"world_size": [4]})) == (
        "parallel.grad_compression='fp16' with pipeline_stages=2 and 2 data-parallel replicas per stage is not "
        "supported (compression runs on the world group only); use grad_compression='none' or pipeline_stages=1 "
        "(run world_size=4)"
    )


def test_the_run_is_named_by_every_swept_setting():
    assert error_of(conf(sweep={"world_size": [2], "pipeline_stages": [2], "micro_batches": [1]})).endswith(
        "(run world_size=2, pipeline_stages=2, micro_batches=1)"
    )


# ---- one value checked outside a sweep (a tune trial) and the file's own shape -----------------------------


def test_a_trial_value_is_named_by_its_section_unless_swept():
    from perfbench.run.config import plan_point

    cfg = ok(conf(sweep={"batch_size": [4, 8]}))
    with pytest.raises(ConfigError) as exc:
        plan_point(cfg, {"lr": -1}, "p")
    assert str(exc.value) == "train.lr: -1 must be at least 0.0"
    with pytest.raises(ConfigError) as exc:
        plan_point(cfg, {"batch_size": 0}, "p")
    assert str(exc.value) == "sweep.batch_size: 0 must be at least 1"


def test_the_file_must_be_a_mapping():
    assert error_of(None) == "the config is empty: expected a mapping with at least `workload`"
    assert error_of([1, 2]) == "the config must be a mapping of keys to values, got [1, 2]"


def test_sweep_axes_read_as_written():
    c = ok(conf(sweep={"batch_size": 4}))  # one value: a one-point axis
    assert c.sweep["batch_size"] == [4]
    assert error_of(conf(sweep={"world_size": [2, 2]})) == "sweep.world_size: values [2, 2] contain duplicates"
    assert error_of(conf(sweep={"wrld_size": [1]})).startswith(
        "sweep.wrld_size: unknown sweep axis (did you mean `world_size`?) (value [1]; axes may be world_size or any key"
    )


def test_parsed_config_keeps_name_sections_results_and_raw():
    assert ok(conf()).name == "sweep"  # the default name (load_config passes the file's stem)
    c = ok(conf(name="mine", results="out", inject={"delay_ms": 5}))
    assert c.name == "mine" and c.results == "out" and c.inject["delay_ms"] == 5
    assert c.raw["train"] == {"batch_size": 8, "steps": 10, "warmup_steps": 2} and c.raw["name"] == "mine"


def test_unknown_model_key_lists_the_models_keys():
    assert error_of(conf(model={"widht": 8})) == (
        "model.widht: unknown key (did you mean `width`?) (value 8; allowed: image_size, num_classes, width, layers)"
    )


def test_search_section_is_checked_against_the_ranges():
    c = ok(conf(sweep={"lr": {"low": 0.01, "high": 0.03, "step": 0.01}}, search={"strategy": "grid"}))
    assert c.search.strategy == "grid"
    assert error_of(conf(sweep={"lr": {"low": 0.001, "high": 0.1, "log": True}}, search={"strategy": "grid"})) == (
        "sweep.lr: search.strategy grid needs every range to have a `step` (got {low: 0.001, high: 0.1, log: true})"
    )


def test_a_value_error_reads_without_pydantics_prefix():
    """config_error on a ValueError raised by a validator (pydantic prefixes its message with 'Value error, ')."""
    from pydantic import BaseModel, ValidationError, field_validator

    from perfbench.run.config_errors import config_error

    class M(BaseModel):
        x: int

        @field_validator("x")
        @classmethod
        def _odd(cls, v):
            if v % 2 == 0:
                raise ValueError("must be odd")
            return v

    with pytest.raises(ValidationError) as exc:
        M(x=4)
    assert str(config_error(exc.value, "train")) == "train.x: 4 must be odd"


def test_a_union_field_is_named_by_its_key_alone():
    assert error_of(conf(name="has space")) == "name: 'has space' must be 1-64 letters, digits, '_', '.' or '-'"
    assert error_of(conf(launch={"master_port": 80})) == (
        "launch.master_port: 80 must be auto or a port number from 1024 to 65535"
    )


def test_slurm_rules():
    assert ok(conf(launch={"backend": "slurm", "nodes": 2}, sweep={"world_size": [2]}))
    assert error_of(conf(launch={"backend": "slurm", "nodes": 2, "node_rank": 1}, sweep={"world_size": [2]})) == (
        "launch.node_rank: 1: with launch.backend slurm every node takes its rank from Slurm (SLURM_NODEID); "
        "remove launch.node_rank"
    )
    assert ok(conf(launch={"backend": "slurm", "slurm": {"partition": "debug"}}))
    assert error_of(conf(launch={"slurm": {"partition": "debug"}})) == (
        'launch.slurm: {"partition": "debug"} is set but launch.backend is local; set launch.backend: slurm to '
        "submit runs to Slurm"
    )
    # the slurm settings as written, over their defaults
    s = ok(conf(launch={"backend": "slurm", "slurm": {"partition": "debug"}})).launch["slurm"]
    assert s["partition"] == "debug" and s["account"] is None and s["sbatch_args"] == []


# ---- a pipeline split given by hand (the injected unbalanced split) ---------------------------------------------


def test_pipeline_split_cuts_the_layers_as_given():
    """parallel.pipeline_split [n0, n1, ...] gives each stage that many consecutive layers (stem/embedding first,
    head last); without it the cost-balanced partition. Hand-computed bounds."""
    from workloads.parallel.layout_math import partition, stage_bounds

    costs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert stage_bounds(costs, 2, [1, 4]) == [(0, 1), (1, 5)]
    assert stage_bounds(costs, 3, [2, 2, 1]) == [(0, 2), (2, 4), (4, 5)]
    # no split: the partitioner's (1+2+3 = 6 | 4+5 = 9 is the best max for 2 stages)
    assert stage_bounds(costs, 2, None) == partition(costs, 2) == [(0, 3), (3, 5)]
    with pytest.raises(ValueError):
        stage_bounds(costs, 2, [1, 3])


def test_pipeline_split_rules_name_the_key_and_value():
    par = {"pipeline_stages": 2, "micro_batches": 4}
    # resnet50 default layers 3-4-6-3: 16 blocks + stem + head = 18 layers
    assert ok(conf(parallel={**par, "pipeline_split": [2, 16]}, sweep={"world_size": [2]})).parallel[
        "pipeline_split"
    ] == [2, 16]
    assert error_of(conf(parallel={**par, "pipeline_split": [2, 15]}, sweep={"world_size": [2]})) == (
        "parallel.pipeline_split=[2, 15] adds up to 17 layers but workload resnet50 has 18 to split (run world_size=2)"
    )
    assert error_of(conf(parallel={**par, "pipeline_split": [18]}, sweep={"world_size": [2]})) == (
        "parallel.pipeline_split=[18] has 1 entries but parallel.pipeline_stages is 2 (one layer count per stage) "
        "(run world_size=2)"
    )
    assert error_of(conf(parallel={"pipeline_split": [1, 17]}, sweep={"world_size": [2]})) == (
        "parallel.pipeline_split=[1, 17] is set but parallel.pipeline_stages is 1: nothing to split (run world_size=2)"
    )
    assert "parallel.pipeline_split" in error_of(conf(parallel={**par, "pipeline_split": [0, 18]}))
