"""Tensor (model) parallelism, Megatron-style: a layer's weights split over the T ranks of a tensor-parallel group.

Megatron-LM (Shoeybi et al. 2019, section 3) splits a transformer block's two halves the same way:

* attention: the Q/K/V projection is column-parallel (rank t owns heads ``[t*nh/T, (t+1)*nh/T)``), the output
  projection row-parallel (rank t owns the matching input columns); each rank computes its heads alone;
* feed-forward (here: every expert's two matrices): ``w1 [H, F]`` column-parallel (F/T columns per rank), then
  ``w2 [F, H]`` row-parallel (the matching F/T rows); GeLU needs no communication in between.

Two conjugate operators join the split to the replicated rest of the model:

    f = identity forward, all-reduce (sum) of the gradient backward     (before the column-parallel matmul)
    g = all-reduce (sum) forward, identity backward                      (after the row-parallel matmul)

so each half of a block costs one all-reduce forward (g) and one backward (f), of the activation's size.
On the MindSpore CPU backend only AllReduce (sum), AllGather and Broadcast exist; f and g are ``nn.Cell``s with a
custom ``bprop`` over ``ops.AllReduce`` in the tensor-parallel group (AllGather's gradient would need
ReduceScatter).  Biases of row-parallel layers are added once, after g.  Every rank draws the full weights
(same seed) and keeps its slice, so a tensor-parallel model starts from the single-rank model's weights.
"""

from __future__ import annotations

import numpy as np


def build_f_g(group: str):
    """``(f, g)``: two Cells (Megatron's conjugate operators) over ``ops.AllReduce`` in ``group``."""
    from mindspore import nn, ops

    class CopyToTensorParallel(nn.Cell):
        """f: identity forward; backward all-reduces the gradient over the tensor-parallel group."""

        def __init__(self):
            super().__init__()
            self.tp_grad_allreduce = ops.AllReduce(op=ops.ReduceOp.SUM, group=group)

        def construct(self, x):
            return x

        def bprop(self, x, out, dout):
            return (self.tp_grad_allreduce(dout),)

    class ReduceFromTensorParallel(nn.Cell):
        """g: all-reduce (sum) forward over the tensor-parallel group; identity backward."""

        def __init__(self):
            super().__init__()
            self.tp_allreduce = ops.AllReduce(op=ops.ReduceOp.SUM, group=group)

        def construct(self, x):
            return self.tp_allreduce(x)

        def bprop(self, x, out, dout):
            return (dout,)

    return CopyToTensorParallel(), ReduceFromTensorParallel()


def qkv_rows(hidden: int, tp: int, t: int) -> np.ndarray:
    """Rows of a fused ``[3H, H]`` Q/K/V weight (output order q | k | v, heads contiguous in each) that rank t
    of T owns: its heads' rows of q, of k and of v."""
    h = hidden // tp
    return np.concatenate([np.arange(w * hidden + t * h, w * hidden + (t + 1) * h) for w in range(3)])


def column_slice(size: int, tp: int, t: int) -> slice:
    """The block of a dimension of ``size`` that rank t of T owns."""
    n = size // tp
    return slice(t * n, (t + 1) * n)
