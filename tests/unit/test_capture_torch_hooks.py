"""PyTorch's step boundary as perfbench.capture finds it (torch_capture.install: the optimizer's step post-hook and
the outermost module's forward pre-hook), in process on a small model: one record per optimizer step, samples from
the batch dimension (summed over accumulated forwards), each step's wall and CPU time inside its own bounds."""

from __future__ import annotations

import json

import pytest

from perfbench.capture import writer
from perfbench.capture.recorder import Recorder

torch = pytest.importorskip("torch")


def test_optimizer_steps_are_recorded_with_their_batches(tmp_path, monkeypatch):
    from perfbench.capture import recorder as recorder_mod
    from perfbench.capture import torch_capture

    monkeypatch.setattr(writer, "FLUSH_S", 3600.0)
    monkeypatch.setattr(recorder_mod, "MEMORY_EVERY_S", 3600.0)  # one memory sample (step 0), carried after
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rec = Recorder({"run_id": "r", "world_size": 1, "output_dir": str(tmp_path), "train": {}}, rank=0)
    uninstall = torch_capture.install(rec)
    try:
        for micro_batches in ([3], [5], [2, 4], [6]):  # the third step accumulates two forwards: 2 + 4 samples
            opt.zero_grad()
            for n in micro_batches:
                net(torch.randn(n, 4)).sum().backward()
            with torch.no_grad():
                net(torch.randn(7, 4))  # an evaluation forward: not counted
            opt.step()
    finally:
        uninstall()
    rec.finish(0)
    lines = (tmp_path / "metrics" / "rank0.steps.jsonl").read_text().splitlines()
    steps = [json.loads(ln) for ln in lines]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert [s["samples"] for s in steps] == [3, 5, 6, 6]
    for s in steps:
        assert list(s)[: len(writer.STEP_KEYS)] == list(writer.STEP_KEYS)
        assert s["start_ts"] <= s["end_ts"] and s["step_time_s"] == s["end_ts"] - s["start_ts"]
        assert s["cpu_s"] >= 0.0 and s["max_rss_bytes"] == steps[0]["max_rss_bytes"]
    for a, b in zip(steps, steps[1:]):
        assert a["end_ts"] <= b["start_ts"]  # the next step starts after this one's record
    meta = json.loads((tmp_path / "metrics" / "rank0.meta.json").read_text())
    assert meta["capture"] == "optimizer-hook" and meta["recorded_steps"] == 4
    assert meta["samples_source"] == "input batch dimension"
