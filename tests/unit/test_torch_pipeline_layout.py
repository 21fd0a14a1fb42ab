"""The PyTorch pipeline's layout (workloads/torch_ddp/pipeline.py), hand-computed: contiguous stages as MindSpore's,
rank r on stage r // D in replica r % D; and the combinations it refuses, each named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from workloads.torch_ddp.pipeline import layout, refusals  # noqa: E402


def test_contiguous_stages():
    # 2 stages x 2 replicas: ranks 0, 1 run stage 0; 2, 3 stage 1
    assert [layout(4, 2, r) for r in range(4)] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]
    assert [layout(3, 3, r) for r in range(3)] == [(0, 0, 1), (1, 0, 1), (2, 0, 1)]


def _a(**kw):
    base = dict(
        recompute=False,
        zero_stage=0,
        precision="fp32",
        grad_compression="none",
        pipeline_schedule="1f1b",
        micro_batches=4,
        pipeline_stages=2,
    )
    return SimpleNamespace(**{**base, **kw})


def test_refusals_name_the_knob():
    assert refusals(_a()) == []
    assert refusals(_a(micro_batches=1, pipeline_schedule="gpipe")) == []
    (msg,) = refusals(_a(micro_batches=1))
    assert msg.startswith("parallel.micro_batches 1 < pipeline_stages 2")
    assert [m.split()[0] for m in refusals(_a(recompute=True, zero_stage=1, precision="bf16"))] == [
        "train.recompute",
        "parallel.zero_stage",
        "train.precision",
    ]
