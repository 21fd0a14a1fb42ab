"""MoE workload: the MoE layer against an independent NumPy implementation (in-process), and a real msrun
run with expert parallelism over 2 ranks (AllGather + AllReduce dispatch/combine on CPU)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analyzers.analyses.experts import expert_load
from tests.integration.test_pipeline import MOE, moe_runs

# ---------------------------------------------------------------------------------------------- in-process


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _reference_moe(x, wr, w1, b1, w2, b2, k, cap):
    """Top-k routing with slot-major priority and per-expert queues, written as plain loops."""
    N, _ = x.shape
    E = wr.shape[0]
    logits = x @ wr.T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    order = np.argsort(-p, axis=-1)[:, :k]
    gates = np.take_along_axis(p, order, -1)
    gates /= gates.sum(-1, keepdims=True)
    y = np.zeros_like(x)
    queue = [0] * E
    routed = np.zeros(E, int)
    dropped = 0
    for slot in range(k):  # every token's first choice before any second choice
        for n in range(N):
            e = order[n, slot]
            routed[e] += 1
            if queue[e] >= cap:
                dropped += 1
                continue
            queue[e] += 1
            h = _gelu_tanh(x[n] @ w1[e] + b1[e, 0])
            y[n] += gates[n, slot] * (h @ w2[e] + b2[e, 0])
    aux = E * float(np.sum(routed / (N * k) * p.mean(0)))
    return y, routed, dropped, aux


@pytest.mark.parametrize("capacity_factor", [0.5, 1.0, 2.0])
def test_moe_layer_matches_numpy_reference(capacity_factor):
    import mindspore as ms

    from workloads.moe.model import build_layers
    from workloads.parallel.layout_math import capacity

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(1)
    m = dict(MOE, capacity_factor=capacity_factor, num_experts=4, top_k=2, hidden_size=16, seq_len=8)
    b, T, H = 2, 8, 16
    layers, _, C = build_layers(m, tokens=b * T, seq_len=T, seed=3, ep_for_layer=lambda i: None)
    assert C == capacity(b * T, 4, 2, capacity_factor) == math.ceil(capacity_factor * b * T * 2 / 4)
    moe = layers[1].moe
    rng = np.random.default_rng(0)
    x = rng.standard_normal((b, T, H)).astype(np.float32)
    y, aux, stats = moe(ms.Tensor(x))
    ry, routed, dropped, raux = _reference_moe(
        x.reshape(-1, H).astype(np.float64),
        moe.router.weight.asnumpy().astype(np.float64),
        moe.w1.asnumpy(),
        moe.b1.asnumpy(),
        moe.w2.asnumpy(),
        moe.b2.asnumpy(),
        2,
        C,
    )
    stats = stats.asnumpy()
    assert stats[:4].astype(int).tolist() == routed.tolist()
    assert stats[:4].sum() == b * T * 2  # every token's k slots are counted, before the capacity cut
    assert int(stats[4]) == dropped
    assert dropped == sum(max(0, r - C) for r in routed)
    if capacity_factor == 2.0:
        assert dropped == 0
    if capacity_factor == 0.5:
        assert dropped > 0  # capacity 8 slots x 4 experts < 32 slots
    np.testing.assert_allclose(y.asnumpy().reshape(-1, H), ry, rtol=1e-4, atol=1e-5)
    assert float(aux.asnumpy()) == pytest.approx(raux, rel=1e-5)


def test_synthetic_tokens_are_deterministic_and_shifted():
    from workloads.moe.model import SyntheticTokens

    d = SyntheticTokens(64, 8, 8, seed=0, dp_index=1, micro_batches=2)
    x1, y1 = d.batch(3, 1)
    x2, y2 = SyntheticTokens(64, 8, 8, seed=0, dp_index=1, micro_batches=2).batch(3, 1)
    assert (x1 == x2).all() and (y1 == y2).all()
    assert (x1[:, 1:] == y1[:, :-1]).all()  # labels are the next tokens
    assert x1.shape == (4, 8) and x1.dtype == np.int32 and 0 <= x1.min() and x1.max() < 64
    # micro-batches are slices of the replica's batch: cutting it differently keeps the data
    whole, _ = SyntheticTokens(64, 8, 8, seed=0, dp_index=1).batch(3, 0)
    assert (np.concatenate([d.batch(3, 0)[0], x1]) == whole).all()
    assert not (SyntheticTokens(64, 8, 8, seed=0, dp_index=0).batch(3, 0)[0] == whole).all()


# ---------------------------------------------------------------------------------------------- real run


@pytest.fixture
def ep_run(tmp_path_factory):
    run = moe_runs(tmp_path_factory)["ep2"]
    assert run.res.status == "ok", f"{run.res.reason}\n{run.res.log_tail}"
    return run


@pytest.mark.msrun
@pytest.mark.timeout(480)
def test_expert_parallel_run_reports_expert_counts(ep_run):
    cfg = ep_run.cfg
    m, t = cfg["model"], cfg["train"]
    routed_per_rank = t["batch_size"] * m["seq_len"] * m["top_k"] * m["num_layers"]
    rows = []
    for rank in (0, 1):
        steps = ep_run.steps(rank)
        assert len(steps) == t["steps"]
        for s in steps:
            assert len(s["tokens_per_expert"]) == m["num_experts"]
            assert sum(s["tokens_per_expert"]) == s["tokens_routed"] == routed_per_rank
            assert 0 <= s["dropped_tokens"] <= routed_per_rank
            assert math.isfinite(s["loss"]) and s["aux_loss"] > 0
            assert s["samples"] == t["batch_size"] * m["seq_len"]
        rows += steps
    # capacity_factor 1.0 leaves no slack: an imbalanced router must drop slots
    assert sum(s["dropped_tokens"] for s in rows) > 0
    # the two ranks report the same global loss, each its own token counts
    l0 = [s["loss"] for s in ep_run.steps(0)]
    assert l0 == [s["loss"] for s in ep_run.steps(1)]
    meta = ep_run.meta(0)
    assert meta["expert_comm"] == "allgather+allreduce"
    assert meta["experts_per_rank"] == m["num_experts"] // 2
    assert ep_run.steps(0)[0]["comm_bytes"] > 0 and ep_run.steps(0)[0]["collectives"] > 0

    load = expert_load(pd.DataFrame(rows))
    assert load is not None and len(load) == t["steps"]
    assert (load.total_tokens == 2 * routed_per_rank).all()
    # the balance figures, recomputed here from the raw per-rank counts (load_e = sum over ranks)
    for st in load.step:
        per_expert = np.sum([r["tokens_per_expert"] for r in rows if r["step"] == st], axis=0).astype(float)
        row = load[load.step == st].iloc[0]
        assert row.max_mean_ratio == pytest.approx(per_expert.max() / per_expert.mean(), rel=1e-12)
        assert row.cv == pytest.approx(per_expert.std() / per_expert.mean(), rel=1e-12)
    # an imbalanced router (it dropped slots above) shows as imbalance in at least one step
    assert (load.cv > 0).any() and (load.max_mean_ratio > 1).any()
    assert (
        load.dropped_tokens == [sum(r["dropped_tokens"] for r in rows if r["step"] == st) for st in load.step]
    ).all()
