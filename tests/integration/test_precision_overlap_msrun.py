"""fp16 with dynamic loss scaling and overlapped gradient all-reduce, in real 2-rank msrun runs (tiny ResNet).

Expected values from outside the code: the loss-scale sequence follows the rule written out by hand (start
1024, double after 3 finite steps, halve on overflow), the forced overflow is at the configured step, the
all-reduced gradients of the overlapped run give the same losses as the same PyNative run all-reducing after
backward, and its bytes are the fp32 gradient bytes."""

from __future__ import annotations

import json
import math

import pytest

from tests.integration.test_workload_resnet50 import launch
from tests.support import background_launches, prefetched, two_at_a_time

STEPS = 12
OVERFLOW_AT = 6
FP16 = {
    "train": {"precision": "fp16", "loss_scale": 1024.0, "loss_scale_window": 3, "steps": STEPS, "warmup_steps": 1},
    "profile": {"enabled": False, "steps": 1},
    "parallel": {"comm_fusion": "all"},
    "inject": {"overflow_step": OVERFLOW_AT},
}
PYN = {
    "train": {"mode": "pynative", "steps": 5, "warmup_steps": 1},
    "profile": {"enabled": False, "steps": 1},
    "parallel": {"comm_fusion": 0.1},
}


#: the runs, by name
SPECS = {
    "fp16": FP16,
    "overlap": {**PYN, "parallel": {**PYN["parallel"], "overlap_grad_comm": True}},
    "after": PYN,
}


def prefetch_runs(tmp_path_factory) -> dict:
    """The three runs, started in the background when the session collected this module (tests/conftest.py)."""
    with background_launches(*SPECS):  # their msrun processes run beside the tests before this module's
        return _runs(tmp_path_factory)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return prefetched(__name__, _runs, tmp_path_factory)


def _runs(tmp_path_factory) -> dict:
    """The three runs, two at a time: these tests compare scales, losses, bytes and the order of spans within a
    step, not times."""
    out = tmp_path_factory.mktemp("precov")
    got = dict(zip(SPECS, two_at_a_time(lambda name: launch(out, name, SPECS[name], timeout_s=480), SPECS)))
    for name, run in got.items():
        assert run.res.status == "ok", f"{name}: {run.res.reason}\n{run.res.log_tail}"
    return got


@pytest.fixture(scope="module")
def fp16_run(runs):
    return runs["fp16"]


@pytest.fixture(scope="module")
def overlap_runs(runs):
    return runs


def expected_scales(steps: int, overflow_at: int, start: float = 1024.0, window: int = 3) -> list[float]:
    """The scale each step runs with: x2 after `window` finite steps in a row, /2 on overflow (by hand)."""
    out, scale, good = [], start, 0
    for s in range(steps):
        out.append(scale)
        if s == overflow_at:
            scale, good = max(scale / 2, 1.0), 0
        else:
            good += 1
            if good == window:
                scale, good = scale * 2, 0
    return out


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_fp16_loss_scaling_trains_records_its_scale_and_skips_the_overflowed_step(fp16_run):
    run = fp16_run
    assert expected_scales(STEPS, OVERFLOW_AT)[:8] == [1024, 1024, 1024, 2048, 2048, 2048, 4096, 2048]
    for rank in (0, 1):
        steps = run.steps(rank)
        assert [s["step"] for s in steps] == list(range(STEPS))
        assert [s["overflow"] for s in steps] == [s == OVERFLOW_AT for s in range(STEPS)]
        assert [s["loss_scale"] for s in steps] == expected_scales(STEPS, OVERFLOW_AT)
        losses = [s["loss"] for s in steps]
        assert all(math.isfinite(x) for x in losses), losses  # the overflowed gradients never reached the weights
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses  # it trains
        meta = run.meta(rank)
        assert meta["precision"] == "fp16" and meta["loss_scale_init"] == 1024.0
        assert meta["comm_dtype_bytes"] == 4  # AMP keeps fp32 gradients on the wire


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_overlapped_all_reduce_is_issued_during_backward_and_gives_the_same_training(overlap_runs):
    on, off = overlap_runs["overlap"], overlap_runs["after"]
    for rank in (0, 1):
        meta = on.meta(rank)
        assert meta["overlap_grad_comm"] is True and meta["buckets"] > 2
        spans = [json.loads(x) for x in (on.art / "metrics" / f"rank{rank}.spans.jsonl").read_text().splitlines()]
        for step in range(5):
            mine = [s for s in spans if s["step"] == step]
            bwd = [s for s in mine if s["kind"] == "backward"]
            ars = [s for s in mine if s["kind"] == "allreduce"]
            assert len(bwd) == 1 and len(ars) == meta["buckets"]
            assert len([s for s in mine if s["kind"] == "allreduce_wait"]) == 1
            # the first bucket went out before backward ended: it was issued from a gradient hook
            assert min(s["start_ts"] for s in ars) < bwd[0]["end_ts"]
        # the same bytes as all-reducing every fp32 gradient once
        assert {s["comm_bytes"] for s in on.steps(rank)} == {meta["bytes_per_step_uncompressed"]}
        assert {s["collectives"] for s in on.steps(rank)} == {meta["buckets"]}
        # averaged gradients: the same losses as all-reducing after backward
        assert [s["loss"] for s in on.steps(rank)] == pytest.approx([s["loss"] for s in off.steps(rank)], rel=1e-4)
