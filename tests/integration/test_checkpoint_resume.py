"""Checkpoints with real msrun: a run killed after a checkpoint continues from it under `sweep --resume`
(steps continue at K, the loss continues as in an uninterrupted run), and its checkpoint cost is measured."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from perfbench.store import Store
from tests.support import ROOT, run_perfbench, write_yaml
from tests.integration.test_launcher_failures import leftovers

pytestmark = pytest.mark.msrun

CFG = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    # the delay stretches each step so the run can be killed part-way on any machine
    "train": {"batch_size": 4, "steps": 30, "warmup_steps": 2, "checkpoint_every": 5},
    "profile": {"enabled": False, "steps": 1},
    "inject": {"delay_ms": 150},
    "launch": {"timeout_s": 400, "stall_timeout_s": 120},
}


def losses(store: Store, run_id: str) -> dict[int, float]:
    t = store.read_table(run_id, "workload_steps")
    return dict(zip(t["step"].astype(int), t["loss"].astype(float)))


def test_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    cfg = write_yaml(tmp_path / "ck.yaml", dict(CFG, name="ckpt"))
    results = tmp_path / "results"
    store = Store(results)
    # the same config uninterrupted, for its losses and checkpoint steps (not times): started now, beside the run
    # that is killed, in a results folder of its own (the leftover checks below look at `results` only)
    ref_cfg = write_yaml(tmp_path / "ref.yaml", dict(CFG, name="ref"))
    ref_results, ref_log = tmp_path / "ref-results", tmp_path / "ref.log"
    with open(ref_log, "wb") as log:
        ref_proc = subprocess.Popen(
            [sys.executable, "-m", "perfbench", "sweep", str(ref_cfg), "--results", str(ref_results)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _kill_and_resume(cfg, results, store, ref_proc, ref_results, ref_log)
    finally:
        if ref_proc.poll() is None:
            ref_proc.kill()  # its reaper ends the run's msrun tree when the sweep dies
            ref_proc.wait(30)


def _kill_and_resume(cfg, results, store, ref_proc, ref_results, ref_log):
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(results)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.time() + 400
        while time.time() < deadline:
            runs = store.list_runs()
            if runs:
                art = store.run_dir(runs[0]["run_id"]) / "artifacts"
                steps = art / "metrics" / "rank0.steps.jsonl"
                if (
                    (art / "checkpoints" / "rank0-step9.ckpt").exists()
                    and steps.exists()
                    and steps.read_bytes().count(b"\n") >= 12
                ):
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        else:
            pytest.fail("the run did not reach its second checkpoint in time")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = store.list_runs()
    assert run["status"] == "running"
    saved = sorted(
        int(f.stem.split("-step")[1])
        for f in (store.run_dir(run["run_id"]) / "artifacts" / "checkpoints").glob("rank0-step*.ckpt")
    )
    assert saved[:2] == [4, 9]
    k = saved[-1] + 1  # resumes after the newest checkpoint
    t0 = time.time()
    while leftovers(results) and time.time() - t0 < 10:
        time.sleep(0.2)

    r = run_perfbench("sweep", cfg, "--results", results, "--resume", timeout=600)
    (after,) = store.list_runs()
    assert after["run_id"] == run["run_id"] and after["status"] == "ok", r.stderr
    assert after["resumed_from_step"] == k
    resumed = losses(store, after["run_id"])
    assert sorted(resumed) == list(range(30))  # every step once: 0..K-1 from before the kill, K.. after it

    # the same config uninterrupted: the resumed run's losses continue exactly as this one's
    assert ref_proc.wait(timeout=600) == 0, ref_log.read_text(errors="replace")[-3000:]
    ref_store = Store(ref_results)
    (ref,) = ref_store.list_runs()
    ref_losses = losses(ref_store, ref["run_id"])
    steps = list(range(k, 30))
    np.testing.assert_allclose([resumed[s] for s in steps], [ref_losses[s] for s in steps], rtol=1e-4)
    assert abs(resumed[k] - ref_losses[0]) > 1e-3  # it did not start again from fresh weights

    # checkpoint cost: steps 4, 9, ... saved (not the last step); both runs measured it
    for rec in (after, ref):
        assert rec["metrics"].get("checkpoint_save_s") and rec["metrics"]["checkpoint_save_s"] > 0
        assert rec["metrics"].get("checkpoint_cost") is not None
    t = ref_store.read_table(ref["run_id"], "workload_steps")
    assert sorted(t.loc[t["checkpoint_s"].notna(), "step"].astype(int)) == [4, 9, 14, 19, 24]
