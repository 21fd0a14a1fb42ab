"""Expert-parallel dispatch and combine: send each token slot to the rank that owns its expert, and back.

Experts are sharded over an expert-parallel group of W ranks (the data-parallel replicas of one pipeline
stage): rank r owns experts ``[r*E/W, (r+1)*E/W)``.  Every rank packs its tokens into a capacity buffer
``[E, C, H]`` (C slots per expert, from the router).

* ``alltoall`` (Ascend/GPU): ``ops.AlltoAll`` moves exactly the slices each owner needs and back.
* ``allgather+allreduce`` (CPU, where AlltoAll does not exist): dispatch = AllGather of the whole buffer
  (every rank receives all ranks' buffers, ``[W*E, C, H]``, and keeps its own experts' slices); combine =
  AllReduce (sum) of a zero-padded ``[W, E, C, H]`` buffer in which each rank fills its experts' outputs,
  after which rank r reads row r.  Both move W times the bytes AlltoAll would; results are identical.
* ``allreduce+allreduce`` (CPU, expert group smaller than the world, e.g. with pipeline stages): CPU
  AllGather only accepts the world group, so the dispatch is an AllReduce of a zero-padded ``[W, E, C, H]``
  buffer holding this rank's buffer in row r.
  The gradient of AllGather would need ReduceScatter (also missing on CPU), so the dispatch has a custom
  backward: AllReduce the incoming gradient and keep this rank's rows; the combine's backward is an AllReduce.

``build_expert_comm(group, size, rank, num_experts, impl) -> (dispatch, combine)``, two Cells:
``dispatch(buf[E,C,H]) -> [E_local, W*C, H]`` and ``combine(out[E_local, W*C, H]) -> [E, C, H]``; with
size 1 both are the identity.
"""

from __future__ import annotations

IMPLS = ("allgather+allreduce", "allreduce+allreduce", "alltoall", "local")


def default_impl(size: int, world_group: bool = True) -> str:
    """``alltoall`` on Ascend/GPU; on CPU ``allgather+allreduce`` in the world group, else
    ``allreduce+allreduce`` (MindSpore 2.10's CPU AllGather accepts only the world group; AllReduce takes
    sub-groups, e.g. the replicas of one pipeline stage)."""
    import mindspore as ms

    if size == 1:
        return "local"
    if ms.get_context("device_target") in ("Ascend", "GPU"):
        return "alltoall"
    return "allgather+allreduce" if world_group else "allreduce+allreduce"


def build_expert_comm(group: str | None, size: int, rank: int, num_experts: int, impl: str | None = None):  # noqa: C901
    from mindspore import nn, ops

    impl = impl or default_impl(size)
    if impl not in IMPLS:
        raise ValueError(f"unknown expert communication {impl!r} (expected one of {', '.join(IMPLS)})")
    if size > 1 and num_experts % size:
        raise ValueError(f"num_experts={num_experts} is not divisible by the expert-parallel size {size}")
    E, W, r = num_experts, size, rank
    El = E // W

    class _GatherWithReduceGrad(nn.Cell):
        """AllGather forward; backward = AllReduce(dout) and keep this rank's rows (no ReduceScatter on CPU)."""

        def __init__(self):
            super().__init__()
            self.gather = ops.AllGather(group=group)
            self.reduce = ops.AllReduce(op=ops.ReduceOp.SUM, group=group)

        def construct(self, x):
            return self.gather(x)

        def bprop(self, x, out, dout):
            g = self.reduce(dout)
            return (g[r * E : (r + 1) * E],)

    class _SumAllReduce(nn.Cell):
        """AllReduce (sum) forward and backward."""

        def __init__(self):
            super().__init__()
            self.reduce = ops.AllReduce(op=ops.ReduceOp.SUM, group=group)
            self.reduce_b = ops.AllReduce(op=ops.ReduceOp.SUM, group=group)

        def construct(self, x):
            return self.reduce(x)

        def bprop(self, x, out, dout):
            return (self.reduce_b(dout),)

    def _pad_rows(y, axis):
        """Place ``y`` (this rank's block) at block index r of a zero tensor W times larger along ``axis``."""
        shape = list(y.shape)
        if W == 1:
            return y
        parts = []
        if r > 0:
            shape_lo = list(shape)
            shape_lo[axis] = shape[axis] * r
            parts.append(ops.zeros(tuple(shape_lo), y.dtype))
        parts.append(y)
        if r < W - 1:
            shape_hi = list(shape)
            shape_hi[axis] = shape[axis] * (W - 1 - r)
            parts.append(ops.zeros(tuple(shape_hi), y.dtype))
        return ops.concat(tuple(parts), axis=axis)

    class Dispatch(nn.Cell):
        """[E, C, H] on every rank -> [E_local, W*C, H]: this rank's experts, slots of all source ranks."""

        def __init__(self):
            super().__init__()
            if impl == "allgather+allreduce":
                self.gather = _GatherWithReduceGrad()
            elif impl == "allreduce+allreduce":
                self.sum = _SumAllReduce()
            elif impl == "alltoall":
                # split the expert axis over ranks, concatenate what arrives along the capacity axis
                self.a2a = ops.AlltoAll(split_count=W, split_dim=0, concat_dim=1, group=group)

        def construct(self, buf):
            if impl == "local":
                return buf
            if impl == "alltoall":
                return self.a2a(buf)
            _, C, H = buf.shape
            if impl == "allreduce+allreduce":
                g = self.sum(_pad_rows(buf.reshape(1, E, C, H), 0)).reshape(W * E, C, H)
            else:
                g = self.gather(buf)
            g = g.reshape(W, E, C, H)[:, r * El : (r + 1) * El]  # [W, El, C, H]
            return g.transpose(1, 0, 2, 3).reshape(El, W * C, H)

    class Combine(nn.Cell):
        """[E_local, W*C, H] expert outputs -> [E, C, H] for this rank's own tokens."""

        def __init__(self):
            super().__init__()
            if impl in ("allgather+allreduce", "allreduce+allreduce"):
                self.sum = _SumAllReduce()
            elif impl == "alltoall":
                self.a2a = ops.AlltoAll(split_count=W, split_dim=1, concat_dim=0, group=group)

        def construct(self, out):
            if impl == "local":
                return out
            if impl == "alltoall":
                return self.a2a(out)
            _, WC, H = out.shape
            C = WC // W
            y = out.reshape(El, W, C, H).transpose(1, 0, 2, 3)  # [W, El, C, H]
            return self.sum(_pad_rows(y, 1))[r]

    return Dispatch(), Combine()
