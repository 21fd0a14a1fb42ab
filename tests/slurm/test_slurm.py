"""`launch.backend: slurm` on a real two-node Slurm (tests/local_slurm.py: Debian's slurmctld, two slurmd in
network namespaces of their own, munge), started for this module and stopped after it.

The example a user runs (examples/slurm-quickstart.yaml) runs as one job on both nodes and leaves one run
with every node's ranks; a sweep SIGKILLed while its job runs is re-attached by `--resume` (no second job);
a crashing rank fails the job with Slurm's state and the rank's log tail; launch.timeout_s and Ctrl-C
cancel the job (scancel) and leave no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from perfbench.store import Store
from tests.support import ROOT, run_perfbench, write_yaml
from tests.local_slurm import LocalSlurm, install, why_unavailable
from tests.integration.test_launcher_failures import SMALL, leftovers

pytestmark = [pytest.mark.msrun, pytest.mark.slurm]

EXAMPLE = ROOT / "examples" / "slurm-quickstart.yaml"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A real two-node Slurm for this module (SLURM_CONF points at it); every daemon stopped after."""
    reason = why_unavailable()
    if reason:
        pytest.skip(f"no local Slurm: {reason}")
    install()
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    before = os.environ.get("SLURM_CONF")
    cluster.up()
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        cluster.down()
        assert not cluster.running(), "local Slurm daemons survived `down`"


def scontrol_job(job_id: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def jobs_named(name: str) -> list[str]:
    out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True).stdout
    return [
        kv["JobId"]
        for kv in (dict(re.findall(r"(\w+)=(\S*)", ln)) for ln in out.splitlines())
        if kv.get("JobName") == name
    ]


def wait_for_job(store: Store, proc, state: str = "RUNNING", timeout: float = 120) -> tuple[dict, str]:
    """The sweep's first run record once its Slurm job is in `state`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for rec in store.list_runs():
            job = (rec.get("slurm") or {}).get("job_id")
            if job and scontrol_job(job).get("JobState") == state:
                return rec, job
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    pytest.fail(f"no Slurm job reached {state} within {timeout:.0f} s")


def two_node_sweep(tmp_path, name: str, timeout_s: int = 300, **over):
    """SMALL (tests/integration/test_launcher_failures.py) as one 2-rank run on 2 Slurm nodes; returns (config,
    results)."""
    cfg = write_yaml(
        tmp_path / f"{name}.yaml",
        dict(
            SMALL,
            name=name,
            sweep={"world_size": [2]},
            **over,
            launch={
                "backend": "slurm",
                "nodes": 2,
                "timeout_s": timeout_s,
                "slurm": {"partition": "debug", "poll_s": 0.5},
            },
        ),
    )
    return cfg, tmp_path / "results"


def node_addr(cluster: LocalSlurm, node: str) -> str:
    return re.search(rf"NodeName={node} .*?NodeAddr=(\S+)", cluster.conf.read_text()).group(1)


def test_example_runs_on_two_nodes_and_resume_reattaches_to_its_job(slurm, tmp_path, spawn):
    results = tmp_path / "results"
    proc = spawn(
        [sys.executable, "-m", "perfbench", "sweep", str(EXAMPLE), "--results", str(results)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = Store(results)
    rec, job = wait_for_job(store, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep dies without any cleanup; its job runs on under Slurm
    proc.wait(10)
    assert scontrol_job(job)["JobState"] == "RUNNING"

    r = run_perfbench("sweep", EXAMPLE, "--results", results, "--resume", timeout=600)
    assert f"Slurm job {job} RUNNING" in r.stderr, r.stderr  # followed again, not started again
    after = store.read_run(rec["run_id"])
    assert after["status"] == "ok", after.get("error")
    assert after["slurm"]["job_id"] == job and after["reattached"] == 1
    assert jobs_named(f"perfbench-{rec['run_id']}") == [job]
    assert scontrol_job(job)["JobState"] == "COMPLETED"

    # one run, both nodes' ranks: each node ran msrun with its Slurm node rank and node 0 as master
    nodes = after["slurm"]["nodes"]
    assert [(n["node_rank"], n["slurm_node"], n["status"]) for n in nodes] == [
        (0, "pbnode1", "ok"),
        (1, "pbnode2", "ok"),
    ]
    assert {n["master_addr"] for n in nodes} == {node_addr(slurm, "pbnode1")}
    steps = store.read_table(rec["run_id"], "workload_steps")
    assert steps.groupby("rank")["step"].count().to_dict() == {0: 14, 1: 14}  # train.steps of the example
    logs = store.artifacts_dir(rec["run_id"]) / "logs"
    assert "Start scheduler process" in (logs / "msrun-node0.out").read_text()
    assert "Start scheduler process" not in (logs / "msrun-node1.out").read_text()
    # the profiler ran on both nodes: both ranks are in the profiled breakdown
    assert set(store.read_table(rec["run_id"], "step_breakdown")["rank"]) == {0, 1}
    shown = run_perfbench("show", rec["run_id"], "--results", results).stdout
    flat = " ".join(shown.split())  # show wraps its lines to the terminal's width (100 columns when piped)
    assert f"Slurm job {job} COMPLETED on pbnode[1-2]: pbnode1 (node 0, ok), pbnode2 (node 1, ok)" in flat
    assert leftovers(results) == []


def test_crashing_rank_fails_the_job_with_slurms_state_and_the_rank_log(slurm, tmp_path):
    cfg, results = two_node_sweep(tmp_path, "slurmcrash", inject={"crash_rank": 1, "crash_step": 2})
    run_perfbench("sweep", cfg, "--results", results, check=False, timeout=400)
    (rec,) = Store(results).list_runs()
    assert rec["status"] == "failed"
    job = rec["slurm"]["job_id"]
    assert scontrol_job(job)["JobState"] == "FAILED"
    assert rec["error"].startswith(f"Slurm job {job} failed (a task exited non-zero) (FAILED"), rec["error"]
    assert "node 1 (" in rec["error"] and "rank 1 exited with code 3 after step 1" in rec["error"], rec["error"]
    assert rec["failed_rank"] == 1 and "[perfbench] inject" in rec["log_tail"]
    assert leftovers(results) == []


def test_timeout_cancels_the_job_with_scancel(slurm, tmp_path):
    cfg, results = two_node_sweep(tmp_path, "slurmhang", timeout_s=10, inject={"hang_rank": 0, "hang_step": 0})
    t0 = time.time()
    run_perfbench("sweep", cfg, "--results", results, check=False, timeout=300)
    (rec,) = Store(results).list_runs()
    job = rec["slurm"]["job_id"]
    assert rec["status"] == "failed"
    assert rec["error"].startswith(f"timed out after 10 s of running (launch.timeout_s); Slurm job {job} cancelled")
    assert scontrol_job(job)["JobState"] == "CANCELLED"
    assert time.time() - t0 < 120
    assert leftovers(results) == []


def test_ctrl_c_cancels_the_running_job(slurm, tmp_path, spawn):
    cfg, results = two_node_sweep(tmp_path, "slurmctrlc")
    proc = spawn(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(results)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    rec, job = wait_for_job(Store(results), proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert scontrol_job(job)["JobState"] == "CANCELLED"
    after = Store(results).read_run(rec["run_id"])
    assert after["status"] == "running" and after["error"] == "interrupted"  # --resume runs it again
    assert leftovers(results) == []


def script_sweep(tmp_path, name: str, script: dict, **over):
    """A `workload: script` run of world size 2 as one job on the 2 Slurm nodes (one rank per node)."""
    cfg = write_yaml(
        tmp_path / f"{name}.yaml",
        {
            "name": name,
            "workload": "script",
            "script": script,
            "train": {"batch_size": 8, "steps": 4, "warmup_steps": 1},
            "profile": {"enabled": False},
            "sweep": {"world_size": [2]},
            "launch": {
                "backend": "slurm",
                "nodes": 2,
                "timeout_s": 300,
                "slurm": {"partition": "debug", "poll_s": 0.5},
            },
            **over,
        },
    )
    results = tmp_path / "results"
    run_perfbench("sweep", cfg, "--results", results, check=False, timeout=500)
    return Store(results), Store(results).list_runs()


def steps_per_rank(store: Store, run_id: str) -> dict:
    return store.read_table(run_id, "workload_steps").groupby("rank")["step"].count().to_dict()


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_a_users_script_runs_on_two_nodes(slurm, tmp_path, framework):
    """torchrun (PyTorch, gloo) or msrun (MindSpore) on each node of the job, started with the node's Slurm rank
    and node 0 as master; the run's ranks are both nodes' ranks, each with the steps its script trained."""
    if framework == "pytorch":
        script = {
            "path": str(ROOT / "tests" / "integration" / "own_job" / "train_torch_capture.py"),
            "framework": "pytorch",
            "args": ["--batch-size", "{train.batch_size}", "--steps", "{train.steps}"],
        }
        tool = "torchrun"
    else:
        script = {
            "path": str(ROOT / "examples" / "own-job" / "train_mindspore.py"),
            "framework": "mindspore",
            "args": ["--batch-size", "{train.batch_size}", "--steps", "{train.steps}", "--hidden", "16"],
        }
        tool = "msrun"
    store, (rec,) = script_sweep(tmp_path, f"slurm-{framework}", script)
    assert rec["status"] == "ok", rec.get("error")
    assert [(n["node_rank"], n["slurm_node"], n["status"]) for n in rec["slurm"]["nodes"]] == [
        (0, "pbnode1", "ok"),
        (1, "pbnode2", "ok"),
    ]
    assert {n["master_addr"] for n in rec["slurm"]["nodes"]} == {node_addr(slurm, "pbnode1")}
    for n in rec["slurm"]["nodes"]:
        cmd = " ".join(n["command"])
        assert tool in cmd and "perfbench/capture/run.py" in cmd and script["path"] in cmd
        if framework == "pytorch":
            assert f"--nnodes=2 --node_rank={n['node_rank']} --nproc_per_node=1" in cmd
    assert steps_per_rank(store, rec["run_id"]) == {0: 4, 1: 4}
    assert rec["metrics"]["samples_per_step"] == 16
    logs = store.artifacts_dir(rec["run_id"]) / "logs"
    assert (logs / f"{tool}-node0.out").exists() and (logs / f"{tool}-node1.out").exists()
    assert leftovers(tmp_path / "results") == []


def test_a_crashing_script_fails_its_job_with_the_rank_log(slurm, tmp_path):
    script = {
        "path": str(ROOT / "tests" / "integration" / "own_job" / "broken.py"),
        "framework": "pytorch",
        "args": ["--mode", "crash"],
    }
    store, (rec,) = script_sweep(tmp_path, "slurm-crash", script)
    job = rec["slurm"]["job_id"]
    assert rec["status"] == "failed"
    assert rec["error"].startswith(f"Slurm job {job} failed"), rec["error"]
    assert "node 1 (" in rec["error"] and "RuntimeError: boom at step 3" in rec["error"], rec["error"]
    assert rec["failed_rank"] == 1 and "boom at step 3" in rec["log_tail"]
    assert leftovers(tmp_path / "results") == []
