"""Gradient compression for hand-written data parallelism (``parallel.grad_compression``).

* ``none``     - all-reduce fp32 gradients in buckets (``parallel.comm_fusion``).
* ``fp16``     - cast each bucket to fp16 before its AllReduce and back after: half the bytes.
* ``topk``     - top-k sparsification with error feedback: per bucket keep the k = ratio*numel/2 largest
  |g + error| entries, AllGather values (fp32) and indices (int32), sum them densely; bytes = ratio x fp32.
* ``powersgd`` - PowerSGD (Vogels et al. 2019), rank-r approximation of every weight matrix ``M`` (conv kernels
  reshaped to ``[out, in*kh*kw]``) with error feedback: ``M += error; P = M Q; allreduce(P); orthogonalize(P);
  Q = M^T P; allreduce(Q); approx = P Q^T / world; error = M - approx``; Q is kept (warm start).  The ranks are
  chosen so the bytes sent per step come as close as possible to ``compression_ratio`` x the uncompressed fp32
  bytes; vectors (BN, biases) and matrices too small to gain are all-reduced uncompressed.  P's, Q's and the
  uncompressed tensors are each bucketed by ``comm_fusion``.

``make_reducer(parallel, shapes, world_size) -> (cell, info, comm)`` where ``comm`` is the list of
``(bytes, n_collectives)`` this rank sends per step (the workload counts it with ``ctx.count_collective``).
``keep`` (ZeRO-2's owned tensors, uncompressed reducers only): the cell returns only those reduced gradients.
"""

from __future__ import annotations

import math

from workloads.parallel.bucketing import (
    BucketAllReduce,
    compile_construct,
    emit_bucket_allreduce,
    emit_concat,
    plan_buckets,
)


def _matrix_shape(shape) -> tuple[int, int] | None:
    if len(shape) < 2:
        return None
    n = int(shape[0])
    m = int(math.prod(shape[1:]))
    return (n, m)


def powersgd_ranks(shapes, ratio: float) -> list[int]:
    """Rank per tensor (0 = send uncompressed) so that total sent elements ~= ratio * total elements."""
    sizes = [int(math.prod(s)) for s in shapes]
    total = sum(sizes)
    mats = [_matrix_shape(s) for s in shapes]

    def plan(alpha: float) -> tuple[list[int], int]:
        ranks, sent = [], 0
        for size, nm in zip(sizes, mats):
            if nm is None:
                ranks.append(0)
                sent += size
                continue
            n, m = nm
            r = max(1, int(alpha * n * m / (n + m)))
            r = min(r, min(n, m), MAX_RANK)
            if r * (n + m) >= n * m:
                ranks.append(0)
                sent += size
            else:
                ranks.append(r)
                sent += r * (n + m)
        return ranks, sent

    target = ratio * total
    lo, hi = 0.0, 1.0
    best = plan(lo)[0]
    if plan(lo)[1] > target:  # even rank 1 everywhere exceeds the budget: the closest we can get
        return best
    for _ in range(40):
        mid = (lo + hi) / 2
        ranks, sent = plan(mid)
        if sent <= target:
            lo, best = mid, ranks
        else:
            hi = mid
    return best


def make_reducer(parallel: dict, shapes, world_size: int, keep: set[int] | None = None):
    import mindspore as ms

    kind = parallel.get("grad_compression", "none")
    fusion = parallel.get("comm_fusion", 0)
    shapes = [tuple(int(d) for d in s) for s in shapes]
    fp32 = [int(math.prod(s)) * 4 for s in shapes]
    uncompressed = sum(fp32)
    if keep is not None and kind not in ("none", "fp16"):
        raise ValueError(f"only uncompressed reducers return a subset of the gradients, not {kind}")
    if kind in ("none", "fp16"):
        wire = 2 if kind == "fp16" else 4
        nbytes = [b // 4 * wire for b in fp32]
        buckets = plan_buckets(nbytes, fusion)
        cell = BucketAllReduce(shapes, buckets, world_size, ms.float16 if kind == "fp16" else None, keep)
        sent = sum(nbytes)
        info = {
            "buckets": len(buckets),
            "bucket_sizes_bytes": [sum(nbytes[i] for i in b) for b in buckets],
            "compression_ratio_measured": sent / uncompressed,
        }
        return cell, info, [(sent, len(buckets))]
    if kind == "powersgd":
        ratio = float(parallel.get("compression_ratio", 0.01))
        ranks = powersgd_ranks(shapes, ratio)
        cell, info, comm = _powersgd(shapes, ranks, fusion, world_size, int(parallel.get("seed", 0)))
        sent = sum(b for b, _ in comm)
        info.update(compression_ratio_configured=ratio, compression_ratio_measured=sent / uncompressed)
        return cell, info, comm
    if kind == "topk":
        ratio = float(parallel.get("compression_ratio", 0.01))
        cell, info, comm = _topk(shapes, fusion, world_size, ratio)
        sent = sum(b for b, _ in comm)
        info.update(compression_ratio_configured=ratio, compression_ratio_measured=sent / uncompressed)
        return cell, info, comm
    raise ValueError(kind)


def _topk(shapes, fusion, world_size: int, ratio: float):
    """Top-k sparsification with error feedback, per bucket: AllGather of (values fp32, indices int32).

    k = ratio * numel / 2 per bucket, so values + indices come to ``ratio`` x the fp32 bytes.
    """
    import numpy as np
    from mindspore import Parameter, Tensor, nn, ops

    fp32 = [int(math.prod(s)) * 4 for s in shapes]
    buckets = plan_buckets(fp32, fusion)
    L = ["def construct(self, grads):"]
    numels, ks = [], []
    last = None
    for k, b in enumerate(buckets):
        n = sum(int(math.prod(shapes[i])) for i in b)
        kk = max(1, min(n, int(ratio * n / 2)))
        numels.append(n)
        ks.append(kk)
        if len(b) == 1:
            L.append(f"    t{k} = ops.reshape(grads[{b[0]}], (-1,))")
        else:
            emit_concat(L, f"t{k}", [f"grads[{i}]" for i in b])
        L.append(f"    t{k} = t{k} + self.err{k}")
        L.append(f"    _, ti{k} = ops.topk(ops.abs(t{k}), {kk})")
        L.append(f"    tv{k} = ops.gather(t{k}, ti{k}, 0)")
        L.append(f"    ops.assign(self.err{k}, t{k} - ops.unsorted_segment_sum(tv{k}, ti{k}, {n}))")
        if last is not None:
            L.append(f"    tv{k} = ops.depend(tv{k}, {last})")
        L.append(f"    gv{k} = self.allgather(tv{k})")
        L.append(f"    gi{k} = self.allgather(ops.depend(ti{k}, gv{k}))")
        last = f"gi{k}"
        L.append(f"    d{k} = ops.unsorted_segment_sum(gv{k}, gi{k}, {n}) * self.scale")
        off = 0
        for i in b:
            m = int(math.prod(shapes[i]))
            L.append(f"    o{i} = ops.reshape(d{k}[{off}:{off + m}], {tuple(shapes[i])})")
            off += m
    L.append("    return (" + ", ".join(f"o{i}" for i in range(len(shapes))) + ",)")
    fn = compile_construct(L)

    class TopK(nn.Cell):
        def __init__(self):
            super().__init__()
            self.scale = 1.0 / float(world_size)
            self.allgather = ops.AllGather()
            for k, n in enumerate(numels):
                setattr(
                    self,
                    f"err{k}",
                    Parameter(Tensor(np.zeros((n,), np.float32)), name=f"topk_err{k}", requires_grad=False),
                )
            self._construct = fn

        def construct(self, grads):
            return self._construct(self, grads)

    comm = [(sum(kk * 8 for kk in ks), 2 * len(buckets))]
    info = {"buckets": len(buckets), "topk_k": ks, "collective": "allgather"}
    return TopK(), info, comm


MAX_RANK = 32  # upper bound on the PowerSGD rank per matrix


def _powersgd(shapes, ranks, fusion, world_size: int, seed: int):
    import numpy as np
    from mindspore import Parameter, Tensor, nn, ops

    plain = [i for i, r in enumerate(ranks) if r == 0]
    comp = [i for i, r in enumerate(ranks) if r > 0]
    mats = {i: _matrix_shape(shapes[i]) for i in comp}
    p_shapes = [(mats[i][0], ranks[i]) for i in comp]
    q_shapes = [(mats[i][1], ranks[i]) for i in comp]
    plain_shapes = [shapes[i] for i in plain]

    def sizes(ss):
        return [int(math.prod(s)) * 4 for s in ss]

    plain_b = plan_buckets(sizes(plain_shapes), fusion) if plain else []
    p_b = plan_buckets(sizes(p_shapes), fusion) if comp else []
    q_b = plan_buckets(sizes(q_shapes), fusion) if comp else []

    L = ["def construct(self, grads):"]
    for i in range(len(shapes)):
        L.append(f"    g{i} = grads[{i}]")
    scale = "self.scale" if world_size > 1 else None
    chain: list[str] = []
    if plain:
        emit_bucket_allreduce(
            L,
            [f"g{i}" for i in plain],
            [f"o{i}" for i in plain],
            plain_shapes,
            plain_b,
            tag="u",
            scale=scale,
            chain=chain,
        )
    for k, i in enumerate(comp):
        L.append(f"    m{k} = ops.reshape(g{i}, {mats[i]}) + self.err{k}")
        L.append(f"    p{k} = ops.matmul(m{k}, self.q{k})")
    if comp:
        # P is summed (orthogonalization is scale-free); Q is averaged.
        emit_bucket_allreduce(
            L,
            [f"p{k}" for k in range(len(comp))],
            [f"pr{k}" for k in range(len(comp))],
            p_shapes,
            p_b,
            tag="p",
            chain=chain,
        )
    for k, i in enumerate(comp):
        r = ranks[i]
        if r == 1:
            L.append(f"    po{k} = pr{k} / (ops.sqrt(ops.reduce_sum(pr{k} * pr{k})) + 1e-8)")
        else:
            # CholeskyQR2: P <- P L^-T with L = chol(P^T P), twice; 8 ops whatever r is (Gram-Schmidt
            # unrolled into the graph costs O(r^2) ops and compile time)
            L.append(f"    po{k} = pr{k}")
            for _ in range(2):
                L.append(f"    gm{k} = ops.matmul(ops.transpose(po{k}, (1, 0)), po{k})")
                L.append(f"    gm{k} = gm{k} + (ops.trace(gm{k}) * {1e-6 / r} + 1e-30) * self.eye{r}")
                L.append(f"    po{k} = ops.matmul(po{k}, ops.transpose(ops.inverse(ops.cholesky(gm{k})), (1, 0)))")
        L.append(f"    qn{k} = ops.matmul(ops.transpose(m{k}, (1, 0)), po{k})")
    if comp:
        emit_bucket_allreduce(
            L,
            [f"qn{k}" for k in range(len(comp))],
            [f"qr{k}" for k in range(len(comp))],
            q_shapes,
            q_b,
            tag="q",
            scale=scale,
            chain=chain,
        )
    for k, i in enumerate(comp):
        L.append(f"    a{k} = ops.matmul(po{k}, ops.transpose(qr{k}, (1, 0)))")
        L.append(f"    ops.assign(self.err{k}, m{k} - a{k})")
        L.append(f"    ops.assign(self.q{k}, qr{k})")
        L.append(f"    o{i} = ops.reshape(a{k}, {tuple(shapes[i])})")
    L.append("    return (" + ", ".join(f"o{i}" for i in range(len(shapes))) + ",)")
    fn = compile_construct(L)
    rng = np.random.default_rng([seed, 0x9051D])  # same initial Q on every rank

    class PowerSGD(nn.Cell):
        def __init__(self):
            super().__init__()
            self.scale = 1.0 / float(world_size)
            self.allreduce = ops.AllReduce()
            for k, i in enumerate(comp):
                setattr(
                    self,
                    f"err{k}",
                    Parameter(Tensor(np.zeros(mats[i], np.float32)), name=f"psgd_err{k}", requires_grad=False),
                )
                q = rng.standard_normal((mats[i][1], ranks[i])).astype(np.float32)
                setattr(self, f"q{k}", Parameter(Tensor(q), name=f"psgd_q{k}", requires_grad=False))
            for r in sorted({ranks[i] for i in comp if ranks[i] > 1}):
                setattr(self, f"eye{r}", Tensor(np.eye(r, dtype=np.float32)))
            self._construct = fn

        def construct(self, grads):
            return self._construct(self, grads)

    comm = []
    if plain:
        comm.append((sum(sizes(plain_shapes)), len(plain_b)))
    if comp:
        comm.append((sum(sizes(p_shapes)), len(p_b)))
        comm.append((sum(sizes(q_shapes)), len(q_b)))
    info = {
        "buckets": len(plain_b) + len(p_b) + len(q_b),
        "powersgd_compressed_tensors": len(comp),
        "powersgd_plain_tensors": len(plain),
        "powersgd_max_rank": max([ranks[i] for i in comp], default=0),
    }
    return PowerSGD(), info, comm
