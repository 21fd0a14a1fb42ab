"""ZeRO optimizer-state / gradient sharding (``parallel.zero_stage``) for hand-written data parallelism.

Each parameter tensor has one *owner* among the D data-parallel ranks (``shard_owners``: whole tensors, largest
first onto the least-loaded rank, so the shards differ from P/D by at most one tensor).  Only the owner keeps
that parameter's optimizer state and updates it; then every owner broadcasts its updated parameters.

What runs on the CPU backend (ReduceScatter and Reduce are missing there, see docs/workloads.md):

* stage 1 - gradients are all-reduced as in stage 0 (``parallel.comm_fusion`` buckets) and the full reduced
  gradient is kept until the optimizer step ends (what a persistent gradient buffer does); the optimizer
  (momentum or AdamWeightDecay) exists only for the owned shard, so optimizer state is ~1/D per rank.
* stage 2 - the same bucketed all-reduce, but only the owned reduced gradients are split out of the buckets
  (``make_reducer(keep=...)``): the others' never exist beyond their bucket's buffer, so the reduced gradients
  a rank holds are ~1/D.  A real ZeRO-2 reduce-scatters during backward; here backward still materializes
  every local gradient first (graph mode runs backward, then the reducer).
* after the update (``ZeroSync``), each owner broadcasts its updated parameters **in place**, one tensor at a
  time, in parameter order (``mindspore.mint.distributed.broadcast``, eager, outside any compiled graph), where
  ZeRO's AllGather would be.  Nothing is allocated for it but one tensor's send copy at a time: a broadcast in
  compiled graphs would keep receive buffers (4 B per parameter, kept between calls) that take back at D = 2
  exactly the optimizer state stage 1 saves (docs/benchmarks.md, "Memory knobs").  Extra traffic:
  P x 4 bytes per step received, each rank sends its shard.

Losses equal stage 0's: the same reduced gradients feed the same update rule, the broadcast copies it exactly.
"""

from __future__ import annotations

from workloads.parallel.bucketing import compile_construct

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

    class ZeroTrainStep(nn.Cell):
        """loss -> grads -> all-reduce (reducer) -> update of the owned shard (ZeroSync then broadcasts).

        Stage 2's reducer returns only the owned gradients (in index order), stage 1's every gradient."""

        def __init__(self, net_loss, params, owners: list[int], dp_index: int, make_opt, reducer, stage: int):
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
            slots = range(len(mine)) if stage == 2 else mine
            lines.append("    done = self.optimizer((" + ", ".join(f"red[{k}]" for k in slots) + ",))")
            if stage == 1:  # the full reduced gradient lives until the update is done
                lines.append("    done = ops.depend(done, ops.depend(red, done))")
            lines.append("    return ops.depend(loss, done)")
            self._construct = compile_construct(lines)

        def construct(self, x, y):
            return self._construct(self, x, y)

    return ZeroTrainStep


_CELL = None


def ZeroTrainStep(net_loss, params, owners, dp_index, make_opt, reducer, stage):
    """Factory for the MindSpore Cell (keeps this module importable without MindSpore)."""
    global _CELL
    if _CELL is None:
        _CELL = _build_cell()
    return _CELL(net_loss, params, owners, dp_index, make_opt, reducer, stage)


class ZeroSync:
    """After the update: each owner broadcasts its parameters in place, one tensor at a time, in parameter order
    (the same order on every rank, so the collectives match).  ``ranks[d]`` is data-parallel index d's global rank.
    Called eagerly between steps, never inside a compiled graph (whose buffers would stay allocated)."""

    def __init__(self, params, owners: list[int], ranks: list[int] | None = None):
        self.params = list(params)
        self.roots = [ranks[o] if ranks is not None else o for o in owners]
        self.broadcasts = len(self.params)

    def __call__(self) -> None:
        from mindspore.mint.distributed import broadcast

        for p, root in zip(self.params, self.roots):
            broadcast(p, src=root)
