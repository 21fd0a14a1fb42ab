"""workload: script: the sweep YAML's script/knobs sections, templates, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfbench.errors import ConfigError
from perfbench.run.config import load_config, parse_config
from tests.support import ROOT

EXAMPLES = ROOT / "examples" / "own-job"


def raw(**over) -> dict:
    base = {
        "workload": "script",
        "script": {
            "path": "train_pytorch.py",
            "framework": "pytorch",
            "args": ["--batch-size", "{train.batch_size}", "--lr={knobs.lr}", "--ws", "{world_size}"],
            "env": {"MY_FUSION": "{parallel.comm_fusion}"},
        },
        "knobs": {"lr": 0.1},
        "train": {"batch_size": 4, "steps": 6, "warmup_steps": 1},
        "profile": {"steps": 2},
        "sweep": {"world_size": [1, 2], "knobs.lr": [0.1, 0.01]},
    }
    for k, v in over.items():
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return base


def error_of(r: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(r, base_dir=EXAMPLES)
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def test_templates_resolve_per_run_and_knobs_are_axes():
    cfg = parse_config(raw(), base_dir=EXAMPLES)
    plans = cfg.plan("s")
    assert len(plans) == 4
    p = plans[3]  # world_size 2, lr 0.01
    assert p.settings == {"workload": "script", "world_size": 2, "knobs.lr": 0.01, "repeat": 0}
    sc = p.run_config["script"]
    assert sc["args"] == ["--batch-size", "4", "--lr=0.01", "--ws", "2"]
    assert sc["env"] == {"MY_FUSION": "0"}
    assert sc["path"] == str((EXAMPLES / "train_pytorch.py").resolve())
    assert p.run_config["knobs"] == {"lr": 0.01}
    assert p.run_id == "s-ws2-lr0.01-r0"


def test_comm_fusion_all_reaches_the_script_as_a_number_of_mb():
    # `advise` tries `parallel.comm_fusion: all` on many small all-reduces; the example scripts take MB
    # (`--fusion-mb`, `--bucket-cap-mb`, a float): "all" would stop them at argument parsing. It is handed over as
    # 1 TiB in MB (1024 x 1024 = 1,048,576: one bucket for any model); numbers pass as they are
    for fusion, shown in (("all", "1048576"), (32, "32"), (0, "0")):
        cfg = parse_config(raw(parallel={"comm_fusion": fusion}, sweep={"world_size": [2]}), base_dir=EXAMPLES)
        (p,) = cfg.plan("s")
        assert p.run_config["script"]["env"] == {"MY_FUSION": shown}
        assert p.run_config["parallel"]["comm_fusion"] == fusion  # the run's own setting is kept as given


def test_the_examples_plan_eight_runs():
    for name in ("mindspore.yaml", "pytorch.yaml"):
        cfg = load_config(EXAMPLES / name)
        assert len(cfg.plan()) == 8, name
        assert all(Path(p.run_config["script"]["path"]).is_file() for p in cfg.plan())


def test_reference_workloads_run_configs_have_no_script_keys():
    cfg = load_config(ROOT / "examples" / "quickstart.yaml")
    assert all("script" not in p.run_config and "knobs" not in p.run_config for p in cfg.plan())


@pytest.mark.parametrize(
    "over,expected",
    [
        (
            {"script": {"path": "train_pytorch.py", "framework": "pytorch", "args": ["--lr", "{knobs.lrr}"]}},
            "script.args[1]: unknown placeholder {knobs.lrr} in '{knobs.lrr}' (did you mean `{knobs.lr}`?)",
        ),
        (
            {"script": {"path": "train_pytorch.py", "framework": "pytorch", "env": {"X": "{train.batchsize}"}}},
            "script.env.X: unknown placeholder {train.batchsize}",
        ),
        ({"script": {"path": "nope.py", "framework": "pytorch"}}, "script.path: 'nope.py' does not exist"),
        ({"script": {"path": "train_pytorch.py", "framework": "jax"}}, "script.framework: 'jax' must be one of"),
        ({"knobs": {"lr": 0.1, "depth": None}}, "knobs.depth: the knob has no value"),
        ({"sweep": {"knobs.lrr": [1, 2]}}, "sweep.knobs.lrr: unknown knob (did you mean `lr`?)"),
        ({"script": None}, "missing key `script`"),
        ({"workload": "resnet50"}, "script: "),
        ({"parallel": {"zero_stage": 2}}, "parallel.zero_stage 2: PyTorch's ZeroRedundancyOptimizer shards the"),
        ({"launch": {"nodes": 2}}, "launch.nodes: 2: a workload script runs on several nodes through Slurm only"),
        ({"parallel": {"grad_compression": "topk"}}, "parallel.grad_compression topk: PyTorch has no top-k DDP hook"),
    ],
)
def test_config_errors_are_one_line_naming_key_and_value(over, expected):
    assert expected in error_of(raw(**over))


def test_mindspore_refusals_say_why_at_dry_run():
    r = raw(script={"path": "train_mindspore.py", "framework": "mindspore"}, parallel={"zero_stage": 1})
    assert "optimizer sharding runs on Ascend only" in error_of(r)
    r = raw(script={"path": "train_mindspore.py", "framework": "mindspore"}, parallel={"pipeline_stages": 2})
    assert "native pipeline needs Ascend/GPU" in error_of(r)


def test_a_pytorch_script_takes_bf16_and_overlap_a_mindspore_one_and_the_reference_workloads_do_not():
    r = raw(
        train={"batch_size": 4, "steps": 6, "warmup_steps": 1, "precision": "bf16"},
        parallel={"overlap_grad_comm": True},
    )
    (plan, *_) = parse_config(r, base_dir=EXAMPLES).plan("s")
    assert plan.run_config["train"]["precision"] == "bf16" and plan.run_config["parallel"]["overlap_grad_comm"]
    r = raw(script={"path": "train_mindspore.py", "framework": "mindspore"}, parallel={"overlap_grad_comm": True})
    assert "MindSpore overlaps a script's gradients by itself" in error_of(r)
    r = {"workload": "resnet50", "train": {"precision": "bf16"}}
    assert error_of(r).startswith("train.precision: 'bf16' cannot run on the MindSpore CPU backend")


def test_the_pytorch_reference_examples_plan():
    assert len(load_config(ROOT / "examples" / "pytorch-resnet50.yaml").plan("s")) == 2
    plans = load_config(ROOT / "examples" / "pytorch-overlap.yaml").plan("s")
    assert [
        (p.run_config["parallel"]["overlap_grad_comm"], p.run_config["parallel"]["comm_fusion"]) for p in plans
    ] == [(True, 0.5), (True, 2), (True, 25), (False, 0.5), (False, 2), (False, 25)]


def test_settings_json_holds_the_run_settings():
    from perfbench.run.script import settings_json

    p = parse_config(raw(), base_dir=EXAMPLES).plan("s")[0]
    s = json.loads(settings_json(p.run_config))
    assert s["knobs"] == {"lr": 0.1} and s["world_size"] == 1 and s["script"] == {"framework": "pytorch"}
    assert s["parallel"]["comm_fusion"] == 0 and s["train"]["batch_size"] == 4


def test_literal_braces_pass_through():
    from perfbench.run.script import resolve

    assert resolve("{{x}}-{world_size}", {"world_size": 2}, "w") == "{x}-2"


def test_the_json_schema_accepts_the_own_job_examples():
    import jsonschema
    import yaml

    from perfbench.run.config_models import json_schema

    validator = jsonschema.Draft202012Validator(json_schema())
    for path in sorted(EXAMPLES.glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path, errors[0].message)
    bad = yaml.safe_load((EXAMPLES / "pytorch.yaml").read_text())
    bad["sweep"]["knob.hidden"] = [1]  # not knobs.NAME
    assert list(validator.iter_errors(bad))


def test_a_script_goes_to_slurm_with_torchrun_on_every_node(tmp_path):
    """launch.backend slurm: the job script runs one task per node; each node's torchrun gets the node count, its
    Slurm node rank and node 0 as master (static rendezvous)."""
    from perfbench.run.script import torchrun_command
    from perfbench.run.slurm import write_job

    r = raw(launch={"backend": "slurm", "nodes": 2, "slurm": {"partition": "debug"}}, sweep={"world_size": [4]})
    cfg = parse_config(r, base_dir=EXAMPLES)
    (plan, *_) = cfg.plan("s")
    rc = dict(plan.run_config, output_dir=str(tmp_path))
    job = write_job(tmp_path / "run_config.json", rc, cfg.launch, None).read_text()
    assert "#SBATCH --nodes=2" in job and "#SBATCH --ntasks-per-node=1" in job and "#SBATCH --partition=debug" in job
    assert "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1" in job
    assert job.rstrip().endswith(f"-m perfbench.run.slurm node {tmp_path}/slurm/spec.json")
    cmd = torchrun_command(2, 29500, rc["script"], master_addr="10.0.0.1", nodes=2, node_rank=1)
    assert cmd[1:6] == [
        "--nnodes=2",
        "--node_rank=1",
        "--nproc_per_node=2",
        "--master_addr=10.0.0.1",
        "--master_port=29500",
    ]
    assert cmd[6].endswith("perfbench/capture/run.py") and cmd[7] == rc["script"]["path"]


@pytest.mark.parametrize(
    "framework,parallel,expected",
    [
        ("mindspore", {"zero_stage": 1}, "parallel.zero_stage 1: MindSpore's optimizer sharding runs on Ascend only"),
        ("mindspore", {"pipeline_stages": 2}, "MindSpore's native pipeline needs Ascend/GPU"),
        ("pytorch", {"grad_compression": "topk"}, "parallel.grad_compression topk: PyTorch has no top-k DDP hook"),
    ],
)
def test_sweep_dry_run_refuses_what_the_backend_cannot_do_in_one_line(tmp_path, framework, parallel, expected):
    from tests.support import run_perfbench, write_yaml

    script = EXAMPLES / ("train_mindspore.py" if framework == "mindspore" else "train_pytorch.py")
    cfg = write_yaml(
        tmp_path / "s.yaml",
        raw(script={"path": str(script), "framework": framework}, parallel=parallel, sweep={"world_size": [2]}),
    )
    r = run_perfbench("sweep", cfg, "--dry-run", "--results", tmp_path / "results", check=False, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("perfbench: error: ") and expected in line, line
    assert not (tmp_path / "results" / "runs").exists()
