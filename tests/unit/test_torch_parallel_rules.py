"""The PyTorch parallel knobs a script is handed or refused at `--dry-run` (perfbench.capture.parallel's
`pytorch_refusals`, through the config rules), and the `no_sync` helper's choice per micro-batch."""

from __future__ import annotations

import contextlib

import pytest

from perfbench.capture import parallel
from perfbench.run.config import parse_config
from tests.unit.test_script_config import EXAMPLES, error_of, raw

TWO = {"world_size": [2]}


@pytest.mark.parametrize(
    ("par", "expected"),
    [
        ({"zero_stage": 2}, "parallel.zero_stage 2: PyTorch's ZeroRedundancyOptimizer shards the optimizer state only"),
        ({"tensor_parallel": 2}, "parallel.tensor_parallel > 1: not handed to a script"),
    ],
)
def test_what_pytorch_cannot_be_given_is_refused_with_the_reason(par, expected):
    msg = error_of(raw(parallel=par, sweep=TWO))
    assert expected in msg and "refused before running" in msg


def test_zero1_needs_two_ranks():
    assert "parallel.zero_stage 1: needs world_size >= 2" in error_of(raw(parallel={"zero_stage": 1}))


def test_pipeline_stages_reach_a_pytorch_script_not_a_mindspore_one():
    cfg = parse_config(raw(parallel={"pipeline_stages": 2, "micro_batches": 2}, sweep=TWO), base_dir=EXAMPLES)
    (plan,) = cfg.plan("s")
    assert plan.run_config["parallel"]["pipeline_stages"] == 2
    ms = raw(script={"path": "train_mindspore.py", "framework": "mindspore"}, parallel={"pipeline_stages": 2})
    assert "parallel.pipeline_stages > 1: not handed to a MindSpore script" in error_of(ms)


def test_micro_batches_and_zero1_reach_a_pytorch_script_not_a_mindspore_one():
    cfg = parse_config(raw(parallel={"micro_batches": 2, "zero_stage": 1}, sweep=TWO), base_dir=EXAMPLES)
    (plan,) = cfg.plan("s")
    assert plan.run_config["parallel"]["micro_batches"] == 2 and plan.run_config["parallel"]["zero_stage"] == 1
    ms = raw(script={"path": "train_mindspore.py", "framework": "mindspore"}, parallel={"micro_batches": 2})
    assert "parallel.micro_batches > 1: not handed to a MindSpore script" in error_of(ms)


class _DDPLike:
    """Has DDP's `no_sync()` (a context manager): what `sync` hands back for the first M-1 micro-batches."""

    def __init__(self):
        self.calls = 0

    @contextlib.contextmanager
    def no_sync(self):
        self.calls += 1
        yield


def test_sync_skips_the_all_reduce_on_all_but_the_last_micro_batch():
    m = _DDPLike()
    for i in range(4):
        with parallel.sync(m, i, 4):
            pass
    assert m.calls == 3  # micro-batches 0, 1, 2 accumulate; 3 all-reduces
    with parallel.sync(object(), 0, 4):  # no DDP (one rank): nothing to skip
        pass
