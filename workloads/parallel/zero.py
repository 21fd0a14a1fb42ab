"""ZeRO optimizer-state / gradient sharding (``parallel.zero_stage``) for hand-written data parallelism.

Each parameter tensor has one *owner* among the D data-parallel ranks (``shard_owners``: whole tensors, largest
first onto the least-loaded rank, so the shards differ from P/D by at most one tensor).  Only the owner keeps
that parameter's optimizer state and updates it; then every owner broadcasts its updated parameters.

What runs on the CPU backend (ReduceScatter and Reduce are missing there, see docs/workloads.md):

* stage 1 - gradients are all-reduced as in stage 0 (``parallel.comm_fusion`` buckets) and the full reduced
  gradient is kept until the optimizer step ends (what a persistent gradient buffer does); the optimizer
  (momentum or AdamWeightDecay) exists only for the owned shard, so optimizer state is ~1/D per rank.
* stage 2 - the same all-reduce, but each rank keeps only its owned gradients: the others are dropped right
  after their bucket's all-reduce.  A real ZeRO-2 reduce-scatters during backward; here backward still
  materializes every gradient first (graph mode runs backward, then the reducer), so the peak saving over
  stage 1 is only the reduced gradients no longer held through the update.
* after the update, in a graph call of its own (``ZeroSync``), each owner (root) broadcasts its updated parameters
  in ``parallel.comm_fusion``-sized buckets (so one broadcast's receive buffer is at most one bucket), in rank
  order, where ZeRO's AllGather would be.  Extra traffic: P x 4 bytes per step received, each rank sends its shard.

Losses equal stage 0's: the same reduced gradients feed the same update rule, the broadcast copies it exactly.
"""

from __future__ import annotations

STAGES = (0, 1, 2)


def shard_owners(sizes: list[int], dp: int) -> list[int]:
    """Owner (data-parallel index) of each tensor: largest tensor first onto the least-loaded owner
    (ties: lower index).  Deterministic, the same on every rank."""
    load = [0] * dp
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(dp), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


def shard_bytes(sizes: list[int], dp: int) -> list[int]:
    """Bytes each owner holds under ``shard_owners``."""
    load = [0] * dp
    for size, r in zip(sizes, shard_owners(sizes, dp)):
        load[r] += size
    return load


def _build_cell():
    from mindspore import nn, ops

    from workloads.parallel.bucketing import compile_construct

    class ZeroTrainStep(nn.Cell):
        """loss -> grads -> all-reduce (reducer) -> update of the owned shard (ZeroSync then broadcasts)."""

        def __init__(self, net_loss, params, owners: list[int], dp_index: int, dp: int, make_opt, reducer, stage: int):
            super().__init__(auto_prefix=False)
            self.network = net_loss
            self.weights = params  # ParameterTuple of every trainable parameter
            self.grad = ops.GradOperation(get_by_list=True, sens_param=False)
            self.reducer = reducer
            mine = [i for i, o in enumerate(owners) if o == dp_index]
            self.optimizer = make_opt([params[i] for i in mine])
            lines = [
                "def construct(self, x, y):",
                "    loss = self.network(x, y)",
                "    grads = self.grad(self.network, self.weights)(x, y)",
                "    red = self.reducer(grads)",
            ]
            owned = ", ".join(f"red[{i}]" for i in mine)
            lines.append(f"    done = self.optimizer(({owned},))")
            if stage == 1:  # the full reduced gradient lives until the update is done
                lines.append("    done = ops.depend(done, ops.depend(red, done))")
            lines.append("    return ops.depend(loss, done)")
            self._construct = compile_construct(lines)

        def construct(self, x, y):
            return self._construct(self, x, y)

    class ZeroSync(nn.Cell):
        """After the update (a graph call of its own, so it reads the updated values): every owner broadcasts its
        parameters, in owner order, and every rank assigns what it received."""

        def __init__(self, params, owners: list[int], dp: int, comm_fusion=0):
            super().__init__(auto_prefix=False)
            from workloads.parallel.bucketing import plan_buckets

            self.weights = params
            sizes = [int(p.size) * 4 for p in params]
            chunks = []  # (root, parameter indices): the owner's shard in comm_fusion-sized broadcasts, so the
            for r in range(dp):  # receive buffer of one broadcast is at most one bucket
                idx = [i for i, o in enumerate(owners) if o == r]
                chunks += [(r, [idx[j] for j in b]) for b in plan_buckets([sizes[i] for i in idx], comm_fusion)]
            self.bcasts = nn.CellList([_Broadcast(r) for r, _ in chunks])
            lines = ["def construct(self):"]
            prev = None
            for c, (r, idx) in enumerate(chunks):
                ins = ", ".join(f"self.weights[{i}]" for i in idx)
                lines.append(f"    src{c} = ({ins},)" if prev is None else f"    src{c} = ops.depend(({ins},), {prev})")
                lines.append(f"    got{c} = self.bcasts[{c}](src{c})")
                for k, i in enumerate(idx):
                    lines.append(f"    a{c}_{k} = ops.assign(self.weights[{i}], got{c}[{k}])")
                prev = (
                    f"a{c}_{len(idx) - 1}"
                    if len(idx) == 1
                    else "(" + ", ".join(f"a{c}_{k}" for k in range(len(idx))) + ")"
                )
            self.broadcasts = len(chunks)
            lines.append(f"    return {prev}")
            self._construct = compile_construct(lines)

        def construct(self):
            return self._construct(self)

    class _Broadcast(nn.Cell):
        def __init__(self, root: int):
            super().__init__()
            self.op = ops.Broadcast(root)

        def construct(self, xs):
            return self.op(xs)

    return ZeroTrainStep, ZeroSync


_CELLS = None


def ZeroTrainStep(net_loss, params, owners, dp_index, dp, make_opt, reducer, stage):
    """Factory for the MindSpore Cell (keeps this module importable without MindSpore)."""
    global _CELLS
    if _CELLS is None:
        _CELLS = _build_cell()
    return _CELLS[0](net_loss, params, owners, dp_index, dp, make_opt, reducer, stage)


def ZeroSync(params, owners, dp, comm_fusion=0):
    """Factory for the broadcast-after-update Cell (one Broadcast per owner and comm_fusion bucket)."""
    global _CELLS
    if _CELLS is None:
        _CELLS = _build_cell()
    return _CELLS[1](params, owners, dp, comm_fusion)
