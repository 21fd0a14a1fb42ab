"""One capture path: the reference runner and perfbench.capture write step records and meta with the same keys
(docs/architecture.md, "Contract: launcher -> workload"); perfbench.capture imports no pandas and no framework."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def _capture_records(tmp_path, monkeypatch) -> tuple[list[dict], dict]:
    cfg = {
        "run_id": "r",
        "workload": "script",
        "world_size": 1,
        "output_dir": str(tmp_path),
        "train": {"batch_size": 4, "warmup_steps": 1},
        "profile": {"enabled": False},
    }
    (tmp_path / "run_config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PERFBENCH_RUN_CONFIG", str(tmp_path / "run_config.json"))
    import perfbench.capture.recorder as recorder
    from perfbench import capture

    monkeypatch.setattr(recorder, "_LOADED", False)
    monkeypatch.setattr(recorder, "_RECORDER", None)
    for i in range(3):
        with capture.step(samples=8) as s:
            s.loss = 1.0 / (i + 1)
    recorder.current().finish(0)
    steps = [json.loads(line) for line in (tmp_path / "metrics" / "rank0.steps.jsonl").read_text().splitlines()]
    meta = json.loads((tmp_path / "metrics" / "rank0.meta.json").read_text())
    return steps, meta


def _runner_records(tmp_path) -> tuple[list[dict], dict]:
    """A step written through workloads.runner.RunContext as runner.run() does (no MindSpore needed)."""
    from workloads.runner import RunContext

    ctx = RunContext({}, 0, 1, tmp_path)
    ctx._begin_step(0)
    ctx.recorder.begin()
    ctx.recorder.end(8, 0.5, **ctx._comm_counted())
    ctx.set_meta(rank=0, world_size=1)
    ctx.recorder.finish(0)
    ctx.close()
    steps = [json.loads(line) for line in (tmp_path / "metrics" / "rank0.steps.jsonl").read_text().splitlines()]
    return steps, json.loads((tmp_path / "metrics" / "rank0.meta.json").read_text())


def test_runner_and_capture_write_the_same_step_keys(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cap_steps, cap_meta = _capture_records(tmp_path / "a", monkeypatch)
    run_steps, run_meta = _runner_records(tmp_path / "b")
    assert [s["step"] for s in cap_steps] == [0, 1, 2]
    assert [s["samples"] for s in cap_steps] == [8, 8, 8]
    assert [s["loss"] for s in cap_steps] == [1.0, 0.5, 1.0 / 3]
    assert set(cap_steps[0]) == set(run_steps[0])
    assert list(cap_steps[0])[:8] == list(run_steps[0])[:8]  # the contract's order
    assert {"rank", "world_size", "finished"} <= set(cap_meta) and cap_meta["finished"] is True
    assert cap_meta["capture"] == "manual" and cap_meta["recorded_steps"] == 3
    assert run_meta["capture"] == "runner" and run_meta["finished"] is True
    assert set(cap_meta) == set(run_meta)


def test_capture_outside_perfbench_is_a_no_op(tmp_path, monkeypatch):
    monkeypatch.delenv("PERFBENCH_RUN_CONFIG", raising=False)
    import perfbench.capture.recorder as recorder
    from perfbench import capture

    monkeypatch.setattr(recorder, "_LOADED", False)
    monkeypatch.setattr(recorder, "_RECORDER", None)
    with capture.step(samples=3) as s:
        s.loss = 1.0
    assert recorder.current() is None and capture.settings() == {} and capture.apply_parallel() == {}


def test_capture_is_light():
    code = (
        "import sys, perfbench.capture, perfbench.capture.run, perfbench.capture.writer\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'torch', 'mindspore', 'analyzers'))\n"
        "print(bad[:5]); sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
