"""A user's script that goes wrong, under real msrun and torchrun: one that crashes on a rank, one that hangs after a
step (launch.stall_timeout_s), one that exits without printing anything and one that never reaches its first step
(launch.timeout_s). Each is stored as failed with the reason and its log tail, and the sweep goes on to the next.
The scripts are written by the test; each takes `--mode` from a swept knob. The run that never steps has a sweep
of its own with a shorter whole-run timeout; the four sweeps (two per framework) run at once."""

from __future__ import annotations

import time

import pytest

from perfbench.store import Store
from tests.integration.test_launcher_failures import leftovers
from tests.support import BACKGROUND_VAR, prefetched, run_perfbench, write_yaml

pytestmark = pytest.mark.msrun

MODES = ["crash", "hang", "silent", "nostep"]

COMMON = """
import argparse, os, sys, time

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=("crash", "hang", "silent", "nostep"))
a = p.parse_args()
if a.mode == "silent":
    os._exit(3)  # not a word on stdout or stderr
if a.mode == "nostep":  # stuck before the framework's start-up: only the launcher's start comes before this line
    print(f"rank {os.environ.get('RANK_ID', os.environ.get('RANK'))}: waiting for data that never comes", flush=True)
    time.sleep(3600)
"""

TORCH = (
    COMMON
    + """
import torch
import torch.distributed as dist
from torch import nn

dist.init_process_group("gloo")
rank = dist.get_rank()
net = nn.Linear(8, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(6):
    if a.mode == "hang" and rank == 0 and step == 2:
        print("rank 0: stuck in step 2", flush=True)
        time.sleep(3600)
    loss = net(torch.randn(4, 8)).sum()
    loss.backward()
    if a.mode == "crash" and rank == 1 and step == 3:
        raise RuntimeError("boom at step 3")
    opt.step()
    dist.all_reduce(loss.detach())
dist.destroy_process_group()
"""
)

MINDSPORE = (
    COMMON
    + """
import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback

ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)
init()
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)


class GoWrong(Callback):
    def on_train_step_end(self, run_context):
        step = run_context.original_args().cur_step_num  # 1, 2, ...
        if a.mode == "crash" and rank == 1 and step == 3:
            raise RuntimeError("boom at step 3")
        if a.mode == "hang" and rank == 0 and step == 2:
            print("rank 0: stuck after step 2", flush=True)
            time.sleep(3600)


x = np.random.default_rng(0).standard_normal((48, 8)).astype(np.float32)
y = np.zeros(48, np.int32)
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False, num_shards=size, shard_id=rank).batch(4)
net = nn.Dense(8, 2)
model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.SGD(net.trainable_params()))
model.train(1, data, callbacks=[GoWrong()], dataset_sink_mode=False)
"""
)


#: launch.timeout_s of the sweep with the three modes that end on their own, and of the "nostep" run's own sweep,
#: which runs beside it. The first only has to cover a start-up and a few steps on a loaded machine (at load ~17 the
#: PyTorch hang run once hit a 60 s timeout before its 15 s stall); the runs never wait for it. The "nostep" run ends
#: only by its timeout, which has to cover msrun's or torchrun's start and perfbench's step capture (which imports the
#: framework) before the script prints and sleeps, before its own framework imports and the cluster join. 45 s is
#: under the MindSpore sweep of three beside it (~65 s at load 2), so the whole fixture waits for that sweep, not for
#: a timeout (with the script stuck after the cluster join, MindSpore's needed 90 s: seen at ~40 s under load).
TIMEOUTS = {"pytorch": (120, 45), "mindspore": (180, 45)}


def _sweep(tmp_path, script, framework: str, name: str, modes: list[str], timeout_s: int, env: dict | None):
    cfg = write_yaml(
        tmp_path / f"{name}.yaml",
        {
            "name": f"{name}-{framework}",
            "workload": "script",
            "script": {"path": str(script), "framework": framework, "args": ["--mode", "{knobs.mode}"]},
            "knobs": {"mode": "crash"},
            "train": {"steps": 6, "warmup_steps": 1},
            "profile": {"enabled": False},
            "sweep": {"world_size": [2], "knobs.mode": modes},
            "launch": {"timeout_s": timeout_s, "stall_timeout_s": 15},
        },
    )
    results = tmp_path / name
    t0 = time.time()
    r = run_perfbench("sweep", cfg, "--results", results, check=False, timeout=900, env=env)
    return results, r, time.time() - t0


def _failing_sweeps(tmp_path_factory, env: dict | None = None):
    """Both frameworks' sweeps at once, four in all: per framework the three modes that end on their own and the
    "nostep" run. A "nostep" run sleeps once its launcher has started it, so past the start-ups at most two launches
    are busy at a time. {framework: (the two sweeps' (results, process, wall s), the nostep timeout)}."""
    from concurrent.futures import ThreadPoolExecutor

    stepping = [m for m in MODES if m != "nostep"]
    futures = {}
    with ThreadPoolExecutor(4) as pool:
        for framework, (timeout_s, nostep_timeout_s) in TIMEOUTS.items():
            base = tmp_path_factory.mktemp(f"failing-{framework}")
            script = base / "bad.py"
            script.write_text(TORCH if framework == "pytorch" else MINDSPORE)
            futures[framework] = (
                pool.submit(_sweep, base, script, framework, "bad", stepping, timeout_s, env),
                pool.submit(_sweep, base, script, framework, "nostep", ["nostep"], nostep_timeout_s, env),
            )
        return {fw: (main.result(), late.result()) for fw, (main, late) in futures.items()}


def prefetch_runs(tmp_path_factory):
    """What tests/conftest.py starts in the background when this module's tests are in the session: the tests check
    statuses, reasons and log tails, not times, and the runs mostly wait (timeouts, stalls, a crashed rank's
    heartbeat timeout), so they overlap the fast tests collected before them."""
    return _failing_sweeps(tmp_path_factory, {BACKGROUND_VAR: "1"})


@pytest.fixture(scope="module")
def failing_sweeps(tmp_path_factory):
    """The four sweeps: started at the session's start (prefetch_runs) when the session collected this module."""
    return prefetched(__name__, _failing_sweeps, tmp_path_factory)


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_a_failing_script_is_stored_failed_and_the_sweep_goes_on(failing_sweeps, framework):
    timeout_s, nostep_timeout_s = TIMEOUTS[framework]
    stepping = [m for m in MODES if m != "nostep"]
    (results, r, wall), (late_results, late_r, late_wall) = failing_sweeps[framework]
    runs = {}
    for res, proc, modes in ((results, r, stepping), (late_results, late_r, ["nostep"])):
        store = Store(res)
        (sw,) = store.list_sweeps()
        got = {rec["settings"]["knobs.mode"]: rec for rec in (store.read_run(rid) for rid in sw["runs"])}
        assert sorted(got) == sorted(modes), proc.stdout + proc.stderr  # every run stored: the sweep went on
        runs.update(got)
    for mode, rec in runs.items():
        assert rec["status"] == "failed", (mode, rec.get("error"))
        assert rec["error"] and "\n" not in rec["error"], (mode, rec["error"])
        assert rec["launch"]["wall_s"] > 0
    tool = "torchrun" if framework == "pytorch" else "msrun"

    crash = runs["crash"]
    assert crash["failed_rank"] == 1, crash["error"]
    # PyTorch: steps 0-2 recorded, then the raise in step 3's backward; MindSpore: the script's callback raises
    # at the end of step 3 before perfbench's records it (steps 0-1 recorded)
    after = "after step 2" if framework == "pytorch" else "after step 1"
    assert crash["error"].startswith(f"rank 1 exited with code 1 {after} ({tool}"), crash["error"]
    assert crash["error"].endswith("RuntimeError: boom at step 3"), crash["error"]
    assert "boom at step 3" in crash["log_tail"]

    hang = runs["hang"]
    assert hang["error"].startswith("hung: no rank finished a step for 15 s (launch.stall_timeout_s)"), hang["error"]
    assert "stuck" in hang["log_tail"]

    silent = runs["silent"]
    assert "exit code" in silent["error"] and "printed nothing" in silent["error"], silent["error"]

    nostep = runs["nostep"]
    assert nostep["error"].startswith(f"timed out after {nostep_timeout_s} s (launch.timeout_s)"), nostep["error"]
    assert "no rank finished step 1" in nostep["error"], nostep["error"]
    assert "waiting for data that never comes" in nostep["log_tail"]
    # nothing waited past its timeout
    assert wall < len(stepping) * timeout_s + 300 and late_wall < nostep_timeout_s + 300
    assert leftovers(results) == [] and leftovers(late_results) == []
