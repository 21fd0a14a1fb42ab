"""grad_compression: fp16 and PowerSGD, byte accounting checked against the profile, loss still goes down."""

from __future__ import annotations

import math

import pytest

from tests.integration.test_workload_resnet50 import resnet_runs  # noqa: F401  (session fixture)
from workloads.parallel.compression import MAX_RANK, powersgd_ranks


def _sent(shapes, ranks):
    tot = 0
    for s, r in zip(shapes, ranks):
        if r == 0:
            tot += math.prod(s)
        else:
            n, m = s[0], math.prod(s[1:])
            tot += r * (n + m)
            assert r * (n + m) < n * m  # only compressed where it saves bytes
    return tot


def test_powersgd_ranks_meet_the_ratio():
    shapes = [(256, 256, 3, 3), (512, 256, 1, 1), (1000, 2048), (64,), (64,), (2048,)]
    total = sum(math.prod(s) for s in shapes)
    for ratio in (0.01, 0.05, 0.2):
        ranks = powersgd_ranks(shapes, ratio)
        sent = _sent(shapes, ranks)
        assert sent <= ratio * total
        assert sent >= 0.7 * ratio * total or max(ranks) == MAX_RANK, (ratio, sent / total)
        assert all(r == 0 for s, r in zip(shapes, ranks) if len(s) == 1)  # vectors are sent as they are
    # a smaller ratio never sends more
    assert _sent(shapes, powersgd_ranks(shapes, 0.01)) < _sent(shapes, powersgd_ranks(shapes, 0.2))


def test_powersgd_ratio_too_small_to_reach_falls_back_to_rank_one():
    shapes = [(16, 16, 3, 3), (8,)]
    ranks = powersgd_ranks(shapes, 1e-4)
    assert ranks == [1, 0]


def _mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_fp16_halves_gradient_bytes(resnet_runs):  # noqa: F811
    resnet_runs.prefetch("pball", "fp16")
    none, fp16 = resnet_runs.get("pball"), resnet_runs.get("fp16")
    for rank in (0, 1):
        b_none = {s["comm_bytes"] for s in none.steps(rank)}
        b_fp16 = {s["comm_bytes"] for s in fp16.steps(rank)}
        assert len(b_none) == 1 and len(b_fp16) == 1
        assert b_fp16.pop() * 2 == b_none.pop() == none.meta(rank)["bytes_per_step_uncompressed"]
        # the profile shows the same elements all-reduced, with casts around the AllReduce
        assert fp16.allreduce_numels(rank) == none.allreduce_numels(rank)
        casts = [e for e in fp16.cpu_ops(rank) if "reducer" in e["name"] and "/Cast" in e["name"]]
        assert len(casts) >= 2 * fp16.allreduces_per_step(rank)
        assert not [e for e in none.cpu_ops(rank) if "reducer" in e["name"] and "/Cast" in e["name"]]
    assert fp16.meta(0)["compression_ratio_measured"] == 0.5
    for run in (none, fp16):
        loss = [s["loss"] for s in run.steps(0)]
        assert _mean(loss[-4:]) < 0.8 * _mean(loss[:4]), loss


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_powersgd_cuts_bytes_by_the_ratio_and_still_learns(resnet_runs):  # noqa: F811
    run = resnet_runs.get("psgd")
    meta = run.meta(0)
    ratio = run.cfg["parallel"]["compression_ratio"]
    unc = meta["bytes_per_step_uncompressed"]
    assert unc == meta["params"] * 4
    for rank in (0, 1):
        sent = {s["comm_bytes"] for s in run.steps(rank)}
        assert len(sent) == 1
        sent = sent.pop()
        assert 0.5 * ratio <= sent / unc <= ratio, sent / unc
        # the profile agrees: the AllReduce buffers hold exactly the bytes we counted (fp32)
        assert sum(run.allreduce_numels(rank)) * 4 == sent
        # P's, Q's and the uncompressed vectors: three fused AllReduces per step with comm_fusion 'all'
        assert run.allreduces_per_step(rank) == 3
    assert meta["compression_ratio_configured"] == ratio
    assert abs(meta["compression_ratio_measured"] - sent / unc) < 1e-12
    loss = [s["loss"] for s in run.steps(0)]
    assert _mean(loss[-4:]) < 0.8 * _mean(loss[:4]), loss


@pytest.mark.msrun
@pytest.mark.timeout(600)
def test_topk_cuts_bytes_by_the_ratio_and_still_learns(resnet_runs):  # noqa: F811
    resnet_runs.prefetch("topk", "psgd")
    run = resnet_runs.get("topk")
    meta = run.meta(0)
    ratio = run.cfg["parallel"]["compression_ratio"]
    unc = meta["bytes_per_step_uncompressed"]
    for rank in (0, 1):
        (sent,) = {s["comm_bytes"] for s in run.steps(rank)}
        # k = ratio * numel / 2 values (fp32) + k indices (int32): ratio x the fp32 bytes, up to rounding k down
        assert ratio * unc - 8 < sent <= ratio * unc
        ops = run.cpu_ops(rank)
        gathers = [e for e in ops if e["name"].rsplit("/", 1)[-1].startswith("AllGather")]
        prof = [s for s in run.steps(rank) if s["profiled"]]
        assert len(gathers) == 2 * len(prof)  # values + indices of the one bucket, every step
        assert not [e for e in ops if e["name"].rsplit("/", 1)[-1].startswith("AllReduce")]
    loss = [s["loss"] for s in run.steps(0)]
    assert _mean(loss[-4:]) < 0.8 * _mean(loss[:4]), loss
