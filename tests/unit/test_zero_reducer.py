"""ZeRO-2's reducer: every bucket is all-reduced whole, only the owned gradients are split out and scaled
(workloads/parallel/bucketing.emit_bucket_allreduce with keep); the broadcast roots of ZeroSync.
Expected lines written by hand from the shapes (no MindSpore needed: the code is generated as text)."""

from __future__ import annotations

from workloads.parallel.bucketing import emit_bucket_allreduce
from workloads.parallel.zero import ZeroSync, shard_owners

SHAPES = [(2, 3), (4,), (5,)]  # 6, 4 and 5 elements


def _emit(keep, buckets, scale="s"):
    lines: list[str] = []
    chain: list[str] = []
    emit_bucket_allreduce(
        lines, ["g0", "g1", "g2"], ["o0", "o1", "o2"], SHAPES, buckets, tag="b", scale=scale, chain=chain, keep=keep
    )
    return [ln.strip() for ln in lines], chain


def test_without_keep_every_tensor_is_split_out_after_scaling_the_bucket():
    lines, chain = _emit(None, [[2, 1, 0]])
    assert lines == [
        "b_f0 = ops.concat((",
        "ops.reshape(g2, (-1,)),",
        "ops.reshape(g1, (-1,)),",
        "ops.reshape(g0, (-1,)),",
        "))",
        "b_f0 = self.allreduce(b_f0)",
        "b_f0 = b_f0 * s",
        "o2 = ops.reshape(b_f0[0:5], (5,))",
        "o1 = ops.reshape(b_f0[5:9], (4,))",
        "o0 = ops.reshape(b_f0[9:15], (2, 3))",
    ]
    assert chain == ["b_f0"]


def test_keep_splits_out_and_scales_only_the_owned_slices_at_their_offsets():
    lines, _ = _emit({0, 2}, [[2, 1, 0]])
    assert lines[:6] == [
        "b_f0 = ops.concat((",
        "ops.reshape(g2, (-1,)),",
        "ops.reshape(g1, (-1,)),",
        "ops.reshape(g0, (-1,)),",
        "))",
        "b_f0 = self.allreduce(b_f0)",  # the whole bucket still goes over the wire
    ]
    # g1 (elements 5..8) is never split out; g0 keeps its offset 9 although g1 is skipped; no bucket-wide scale
    assert lines[6:] == ["o2 = ops.reshape(b_f0[0:5], (5,)) * s", "o0 = ops.reshape(b_f0[9:15], (2, 3)) * s"]


def test_keep_with_single_tensor_buckets_and_no_scale():
    lines, chain = _emit({1}, [[2], [1], [0]], scale=None)
    assert lines == [
        "b_f0 = g2",
        "b_f0 = self.allreduce(b_f0)",
        "b_f1 = g1",
        "b_f1 = ops.depend(b_f1, b_f0)",
        "b_f1 = self.allreduce(b_f1)",
        "o1 = b_f1",
        "b_f2 = g0",
        "b_f2 = ops.depend(b_f2, b_f1)",
        "b_f2 = self.allreduce(b_f2)",
    ]
    assert chain == ["b_f0", "b_f1", "b_f2"]  # the last all-reduce is what the cell's return depends on


class _P:
    def __init__(self, size):
        self.size = size


def test_sync_broadcasts_every_tensor_from_its_owner():
    params = [_P(4), _P(9), _P(3), _P(5), _P(1)]
    owners = shard_owners([p.size for p in params], 2)  # [1, 0, 0, 1, 1] (tests/integration/test_zero.py)
    s = ZeroSync(params, owners)
    assert s.roots == [1, 0, 0, 1, 1] and s.broadcasts == 5
    # data-parallel index -> global rank (e.g. ranks 4 and 6 of a larger job)
    assert ZeroSync(params, owners, ranks=[4, 6]).roots == [6, 4, 4, 6, 6]
