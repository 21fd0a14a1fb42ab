"""Sweep config validation: every bad value is named with its key; the plan is the cartesian product."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from perfbench.run.config import load_config, parse_config
from perfbench.errors import ConfigError
from tests.support import ROOT, perfbench_in_process

BASE = {"workload": "resnet50", "train": {"steps": 10, "warmup_steps": 2}, "profile": {"steps": 4}}


def cfg(**over):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in over.items():
        if "__" in key:
            section, sub = key.split("__")
            raw.setdefault(section, {})[sub] = value
        else:
            raw[key] = value
    return raw


def error_of(raw) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(raw)
    return str(exc.value)


def test_examples_are_valid_and_plan_the_product():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        c = load_config(path)
        n = c.repeats
        for values in c.axes().values():
            n *= len(values)
        assert len(c.plan("x")) == n, path


def test_plan_is_cartesian_product_with_repeats_and_stable_ids():
    c = parse_config(cfg(sweep={"world_size": [1, 2], "comm_fusion": [0, 4, "all"]}, repeats=2))
    plans = c.plan("s1")
    assert len(plans) == 2 * 3 * 2
    assert len({p.run_id for p in plans}) == len(plans)
    assert [p.run_id for p in plans] == [p.run_id for p in c.plan("s1")]
    p = next(
        p
        for p in plans
        if p.settings["world_size"] == 2 and p.settings["comm_fusion"] == 4 and p.settings["repeat"] == 1
    )
    assert p.run_config["parallel"]["comm_fusion"] == 4 and p.run_config["world_size"] == 2
    assert p.settings == {"workload": "resnet50", "world_size": 2, "comm_fusion": 4, "repeat": 1}
    # runs differing only by world size / repeat share the config key used for scaling efficiency
    keys = {(q.settings["comm_fusion"]): q.config_key for q in plans}
    assert len(set(keys.values())) == 3
    assert all(q.config_key == keys[q.settings["comm_fusion"]] for q in plans)


def test_model_and_train_keys_can_be_swept():
    c = parse_config(cfg(sweep={"batch_size": [4, 8], "width": [8, 16]}))
    plans = c.plan("s")
    assert {(p.run_config["train"]["batch_size"], p.run_config["model"]["width"]) for p in plans} == {
        (4, 8),
        (4, 16),
        (8, 8),
        (8, 16),
    }


@pytest.mark.parametrize(
    "raw, words",
    [
        (cfg(worklaod="x"), ["worklaod", "did you mean `workload`"]),
        (cfg(workload="bert"), ["workload", "'bert'"]),
        (cfg(train__batch_size="eight"), ["train.batch_size", "'eight'", "integer"]),
        (cfg(train__batch_size=0), ["train.batch_size", "0", "at least 1"]),
        (cfg(train__lr=-1), ["train.lr", "-1"]),
        (cfg(model__layers=[3, 4]), ["model.layers", "[3, 4]"]),
        (cfg(model__depth=50), ["model.depth", "unknown key"]),
        (cfg(sweep={"world_size": [1, 16]}), ["world_size", "16", "larger than allowed", "max_world_size"]),
        (cfg(sweep={"world_size": [1, "two"]}), ["sweep.world_size", "'two'"]),
        (cfg(sweep={"world_size": []}), ["sweep.world_size", "empty"]),
        (cfg(sweep={"world_size": [2, 2]}), ["sweep.world_size", "duplicates"]),
        (cfg(sweep={"wrld_size": [1]}), ["sweep.wrld_size", "did you mean `world_size`"]),
        (cfg(sweep={"grad_compression": ["none", "zip"]}), ["sweep.grad_compression", "'zip'"]),
        (cfg(sweep={"comm_fusion": ["big"]}), ["sweep.comm_fusion", "'big'", "MB"]),
        (cfg(parallel__compression_ratio=2), ["parallel.compression_ratio", "2"]),
        (cfg(sweep={"world_size": [3], "pipeline_stages": [2]}), ["pipeline_stages=2", "world_size=3"]),
        (
            cfg(sweep={"world_size": [2], "pipeline_stages": [2], "micro_batches": [1]}),
            ["micro_batches=1", "pipeline_stages=2", "1F1B"],
        ),
        (
            cfg(
                sweep={"world_size": [2], "pipeline_stages": [2]},
                train={"batch_size": 6, "steps": 10, "warmup_steps": 2},
                parallel={"micro_batches": 4},
            ),
            ["micro_batches=4", "batch_size=6"],
        ),
        (cfg(train__warmup_steps=10), ["train.warmup_steps", "train.steps"]),
        (cfg(profile__steps=9), ["profile.steps", "9"]),
        (cfg(repeats=0), ["repeats", "0"]),
        (cfg(launch__timeout_s="soon"), ["launch.timeout_s", "'soon'"]),
        (cfg(launch__bind_core="maybe"), ["launch.bind_core", "'maybe'"]),
        (cfg(name="has space"), ["name", "'has space'"]),
        (
            cfg(parallel__fusion_impl="mindspore", parallel__grad_compression="fp16"),
            ["fusion_impl='mindspore'", "grad_compression='fp16'"],
        ),
    ],
)
def test_bad_values_name_key_and_value(raw, words):
    msg = error_of(raw)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_moe_rules():
    base = {"workload": "moe", "train": {"steps": 10, "warmup_steps": 2}, "profile": {"steps": 4}}
    assert "top_k=5" in error_of(dict(base, model={"top_k": 5, "num_experts": 4}))
    # num_layers=2: embedding + 2 blocks + head = 4 pipeline units, so 4 stages run and 5 do not
    assert "more than the 4 layers" in error_of(
        dict(base, sweep={"world_size": [5], "pipeline_stages": [5]}, parallel={"micro_batches": 5})
    )
    assert "hidden_size=30" in error_of(dict(base, model={"hidden_size": 30, "num_heads": 4}))


@pytest.mark.parametrize(
    "text, words",
    [
        ("workload: [unclosed", ["not valid YAML", "line 1"]),
        ("", ["empty"]),
        ("- a\n- b\n", ["mapping"]),
    ],
)
def test_unreadable_files(tmp_path, text, words):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    for w in words:
        assert w in str(exc.value)


def test_cli_reports_config_errors_without_traceback(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(cfg(sweep={"world_size": [1, 64]})))
    r = subprocess.run(
        [sys.executable, "-m", "perfbench", "sweep", str(p), "--dry-run"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "world_size" in r.stderr and "64" in r.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "perfbench", "sweep", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_dry_run_json_lists_runs(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "perfbench", "sweep", str(ROOT / "examples" / "quickstart.yaml"), "--dry-run", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    import json

    runs = json.loads(r.stdout)
    assert [x["settings"]["world_size"] for x in runs] == [1, 2]


def test_dry_run_table_lists_every_example_run():
    for path in sorted((ROOT / "examples").glob("*.yaml")):  # in process: `python -m` is tested above
        r = perfbench_in_process("sweep", path, "--dry-run", check=False)
        assert r.returncode == 0, (path, r.stderr)
        n = len(load_config(path).plan("x"))
        assert f"{n} planned runs" in r.stdout, (path, r.stdout)


@pytest.mark.parametrize(
    "raw, words",
    [
        (cfg(parallel__comm_fusoin=4), ["parallel.comm_fusoin", "unknown key", "did you mean `comm_fusion`", "4"]),
        (cfg(profile__enabled="yes"), ["profile.enabled", "'yes'", "true or false"]),
        (cfg(parallel__micro_batches=0), ["parallel.micro_batches", "0", "at least 1"]),
        (cfg(launch__nodes=2, launch__node_rank=5), ["launch.node_rank", "5", "at most 1"]),
        (cfg(launch__backend="pbs"), ["launch.backend", "'pbs'", "'local' or 'slurm'"]),
        (
            cfg(launch__backend="slurm", launch__slurm={"time_limit": "1h"}),
            ["launch.slurm.time_limit", "'1h'", "HH:MM:SS"],
        ),
        (
            cfg(launch__backend="slurm", launch__slurm={"sbatch_args": ["exclusive"]}),
            ["launch.slurm.sbatch_args", '"exclusive"', "starting with '-'"],
        ),
        (
            cfg(launch__backend="slurm", launch__slurm={"partiton": "gpu"}),
            ["launch.slurm.partiton", "unknown key", "did you mean `partition`", "'gpu'"],
        ),
        (cfg(launch__slurm={"partition": "gpu"}), ["launch.slurm", '"partition": "gpu"', "launch.backend is local"]),
        (cfg(launch__backend="slurm", launch__nodes=2, launch__node_rank=1), ["launch.node_rank", "1", "SLURM_NODEID"]),
        (
            cfg(sweep={"world_size": [2], "pipeline_stages": [2], "micro_batches": [1]}),
            ["micro_batches=1", "pipeline_stages=2", "world_size=2"],
        ),
        (cfg(sweep={"lr": {"low": 0.1, "high": "x"}}), ["sweep.lr.high", "'x'", "number"]),
    ],
)
def test_each_kind_of_error_is_one_line_with_key_and_value(raw, words):
    """Unknown key, wrong type, out of range, a rule across keys: each names the dotted key and the value."""
    msg = error_of(raw)
    assert "\n" not in msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_values_keep_their_written_type():
    c = parse_config(cfg(train__lr=1, sweep={"comm_fusion": [4, 2.5, "all"]}))
    assert c.train["lr"] == 1 and isinstance(c.train["lr"], int)
    assert [p.run_config["parallel"]["comm_fusion"] for p in c.plan("s")] == [4, 2.5, "all"]


def test_schema_command_checks_the_examples_and_rejects_bad_keys(tmp_path):
    import json

    import jsonschema

    out = tmp_path / "sweep.schema.json"
    r = subprocess.run(
        [sys.executable, "-m", "perfbench", "schema", "-o", str(out)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    schema = json.loads(out.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path, errors[0].message)
    for bad in (
        cfg(worklaod="resnet50"),
        cfg(train__batch_size="eight"),
        cfg(train__batch_size=0),
        cfg(parallel__grad_compression="zip"),
        cfg(sweep={"wrld_size": [1]}),
        cfg(model__depth=50),
        cfg(model__num_experts=4),
    ):  # a MoE knob in a ResNet config
        assert list(validator.iter_errors(bad)), bad
    # editor hover text comes from the models' descriptions
    assert "per rank" in schema["$defs"]["Train"]["properties"]["batch_size"]["description"]


def test_profile_level_is_checked_and_matches_the_runner():
    from typing import get_args

    from perfbench.run.config_models import Profile
    from workloads.runner import PROFILE_LEVELS

    assert get_args(Profile.model_fields["level"].annotation) == tuple(PROFILE_LEVELS)  # one list of names
    assert parse_config(cfg(profile__level="light")).profile["level"] == "light"
    assert parse_config(cfg()).profile["level"] == "default"
    msg = error_of(cfg(profile__level="max"))
    assert "profile.level" in msg and "'max'" in msg and "light" in msg


def test_slurm_options_become_the_job_scripts_sbatch_lines(tmp_path):
    """Each launch.slurm option is one #SBATCH line of the job script, spelled as sbatch's manual spells it."""
    from perfbench.run.slurm import write_job

    c = parse_config(
        cfg(
            launch__backend="slurm",
            launch__nodes=2,
            sweep={"world_size": [4]},
            launch__slurm={
                "partition": "gpu",
                "account": "proj1",
                "time_limit": "1-02:00:00",
                "cpus_per_task": 8,
                "sbatch_args": ["--exclusive", "--qos=high"],
            },
        )
    )
    assert c.launch["slurm"]["poll_s"] == 2.0  # defaults kept beside the options given
    (plan,) = c.plan("s")
    rc = dict(plan.run_config, output_dir=str(tmp_path))
    script = write_job(tmp_path / "run_config.json", rc, c.launch, None).read_text()
    lines = [ln.split(" ", 1)[1] for ln in script.splitlines() if ln.startswith("#SBATCH ")]
    assert lines == [
        f"--job-name=perfbench-{plan.run_id}",
        "--nodes=2",
        "--ntasks-per-node=1",
        f"--output={tmp_path}/slurm/job-%j.out",
        "--open-mode=append",
        "--no-requeue",
        "--partition=gpu",
        "--account=proj1",
        "--time=1-02:00:00",
        "--cpus-per-task=8",
        "--exclusive",
        "--qos=high",
    ]
    assert "srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 " in script


def test_slurms_job_lines_read_as_state_reason_and_words():
    """A real `scontrol show job -o` line (a `--time=1` job Slurm ended on this machine's test cluster) and a
    sacct line as Slurm's manual spells it: state, reason, exit code, and the words a failed run gets."""
    from perfbench.run.slurm import describe, parse_sacct_job, parse_scontrol_job

    line = (
        "JobId=3 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 "
        "Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 "
        "BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:07 TimeLimit=00:01:00 TimeMin=N/A "
        "Partition=debug NodeList=pbnode1 BatchHost=pbnode1 NumNodes=1 NumCPUs=1 NumTasks=1"
    )
    info = parse_scontrol_job(line)
    assert (info.job_id, info.state, info.reason, info.exit_code, info.nodes, info.final) == (
        "3",
        "TIMEOUT",
        "TimeLimit",
        "0:15",
        "pbnode1",
        True,
    )
    assert describe(info, "3") == "Slurm job 3 reached its time limit (TIMEOUT, reason TimeLimit, exit code 0:15)"
    running = parse_scontrol_job("JobId=9 JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)")
    assert (running.state, running.reason, running.final) == ("PENDING", "Resources", False)
    cancelled = parse_sacct_job("12|CANCELLED by 0|0:15|None|pbnode[1-2]")
    assert (cancelled.state, cancelled.reason, cancelled.nodes) == ("CANCELLED", "CANCELLED by 0", "pbnode[1-2]")
    assert describe(cancelled, "12") == "Slurm job 12 was cancelled (CANCELLED, reason CANCELLED by 0, exit code 0:15)"
    oom = parse_sacct_job("13|OUT_OF_MEMORY|0:125|None|pbnode2")
    assert describe(oom, "13") == "Slurm job 13 ran out of memory (OUT_OF_MEMORY, exit code 0:125)"
    assert describe(None, "14") == "Slurm job 14: Slurm no longer knows it (neither scontrol nor sacct)"
