"""Mixture-of-Experts transformer language-model training (``workload: moe``), see ``model.py``.

Axes: data parallel (D = world_size / (pipeline_stages x tensor_parallel) replicas, which are also the
expert-parallel group: each replica owns ``num_experts / D`` experts), ``tensor_parallel`` T (attention heads and
every expert's feed-forward split Megatron-style over T ranks, ``workloads.parallel.tensor``; the T slices of a
replica hold the same tokens, so the expert counters below are reported by slice 0 only), ``pipeline_stages`` /
``micro_batches`` / ``pipeline_schedule``
(``workloads.parallel.pipeline``), ``grad_compression`` / ``comm_fusion`` for the replicated weights when
``pipeline_stages == 1`` (``workloads.parallel.compression``; expert weights are never all-reduced).

Per step every rank reports ``tokens_per_expert``: for each expert (global expert index) the slots this
rank's tokens routed to it, summed over the MoE layers on this rank's stage, its micro-batches and the top-k
slots, counted *before* the capacity cut (so ``sum == tokens * top_k * layers``; summing the lists over
ranks gives the global load); ``dropped_tokens``: this rank's slots over capacity (same scope);
``tokens_routed``: the list's sum; ``aux_loss``: the load-balancing loss, mean over all MoE layers and
replicas (from one small world all-reduce, which also gives every rank the last stage's loss).
"""

from __future__ import annotations

import numpy as np

from workloads.moe.model import SyntheticTokens, build_layers, build_loss
from workloads.parallel.compression import make_reducer
from workloads.parallel.experts import build_expert_comm, default_impl
from workloads.parallel.layout_math import (
    comm_bytes_per_call,
    moe_layer_costs,
    moe_tp_comm_per_microbatch,
    stage_bounds,
)
from workloads.parallel.pipeline import PipelineTrainer, create_groups
from workloads.parallel.rules import parallel_layout
from workloads.parallel.tensor import build_f_g


class MoEWorkload:
    def __init__(self, ctx):
        import mindspore as ms

        cfg = ctx.config
        m, t, par = cfg["model"], cfg["train"], dict(cfg["parallel"])
        S, M, stage, dp_index, D = parallel_layout("moe", m, par, t, ctx.rank, ctx.world_size)
        self.ctx = ctx
        E, k, L, T = int(m["num_experts"]), int(m["top_k"]), int(m["num_layers"]), int(m["seq_len"])
        H = int(m["hidden_size"])
        mb_size = int(t["batch_size"]) // M
        tokens = mb_size * T
        seed = int(t["seed"])
        self.E, self.L, self.D, self.M = E, L, D, M
        self.TP = int(par.get("tensor_parallel", 1) or 1)

        ms.set_context(mode=ms.PYNATIVE_MODE)  # the host loop and CPU Broadcast need PyNative (see pipeline.py)
        TP = int(par.get("tensor_parallel", 1) or 1)
        tpr = ctx.rank % TP
        self.tp_index = tpr
        groups = create_groups(ctx.rank, ctx.world_size, S, TP)
        ep_group = groups[2]
        tp = None
        if TP > 1:
            tp = (lambda: build_f_g(groups[3]), TP, tpr)
        costs = moe_layer_costs(L)
        lo, hi = stage_bounds(costs, S, par.get("pipeline_split"))[stage]
        impl = default_impl(D, world_group=(S == 1 and TP == 1))
        self.expert_impl = impl

        def ep_for_layer(i):
            if not (lo <= i + 1 < hi) or D == 1:
                return None
            dispatch, combine = build_expert_comm(ep_group, D, dp_index, E, impl)
            return dispatch, combine, D, dp_index

        layers, costs, C = build_layers(m, tokens=tokens, seq_len=T, seed=seed, ep_for_layer=ep_for_layer, tp=tp)
        # expert weights (each replica owns its own experts): not all-reduced over the data-parallel group.
        # By object, not by name: the stage cell renames parameters by position ("1.moe.w1").
        expert_ids = {
            id(getattr(layer.moe, n)) for layer in layers if hasattr(layer, "moe") for n in ("w1", "b1", "w2", "b2")
        }
        data = SyntheticTokens(int(m["vocab_size"]), T, int(t["batch_size"]), seed, dp_index, M)

        reducer_factory = None
        if S == 1 and D > 1 and TP == 1:

            def reducer_factory(shapes, world):
                cell, info, comm = make_reducer(par, shapes, world)
                return cell, dict(info, fusion_impl_used="perfbench"), comm

        self.trainer = PipelineTrainer(
            ctx,
            layers,
            build_loss(),
            data.batch,
            samples_per_microbatch=tokens,
            layer_costs=costs,
            local_param_filter=(lambda p: D > 1 and id(p) in expert_ids),
            aux_weight=float(m["aux_loss_coef"]),
            stats_size=E + 1,
            dp_reducer_factory=reducer_factory,
            groups=groups,
        )
        my_moe_layers = sum(1 for i in range(L) if lo <= i + 1 < hi)
        nbytes, n = comm_bytes_per_call(impl, D, E, C, H)
        # per micro-batch and MoE layer: forward, re-materialized forward, backward (each 2 collectives)
        self.expert_comm_step = (3 * nbytes * my_moe_layers * M, 3 * n * my_moe_layers * M)

        tb, tn = moe_tp_comm_per_microbatch(tokens, H, E, C, TP)
        # per micro-batch and block: g forward, g in the re-materialized forward, f backward (2 all-reduces each)
        self.tp_comm_step = (3 * tb * my_moe_layers * M, 3 * tn * my_moe_layers * M)
        # payload sizes of the collectives inside the stage's compute, by traffic class, for the analyzers
        # (CPU profiles record no group): a size two classes share is left out (unknown, not a guess)
        sizes: dict = {}
        if TP > 1:
            for b in (tokens * H * 4, E * C * H * 4):
                sizes.setdefault(b, set()).add("tensor_parallel")
        if D > 1 and impl != "local":
            buf = E * C * H * 4
            for b in (buf, D * buf) if impl == "allgather+allreduce" else (D * buf,):
                sizes.setdefault(b, set()).add("expert_dispatch")
        comm_size_classes = {str(b): next(iter(c)) for b, c in sizes.items() if len(c) == 1}
        ctx.set_meta(
            expert_comm=impl if D > 1 else None,
            num_experts=E,
            experts_per_rank=E // D,
            top_k=k,
            capacity_per_expert=C,
            tokens_per_microbatch=tokens,
            moe_layers_on_rank=my_moe_layers,
            expert_comm_bytes_per_step=self.expert_comm_step[0],
            tp_comm_bytes_per_step=self.tp_comm_step[0],
            comm_size_classes=comm_size_classes,
            tp_collectives_per_step=self.tp_comm_step[1],
            grad_compression=par.get("grad_compression"),
            comm_fusion=par.get("comm_fusion"),
            fusion_impl=par.get("fusion_impl"),
            params=int(sum(int(np.prod(p.shape)) for p in self.trainer.params)),
            bytes_per_step_uncompressed=(
                int(
                    sum(
                        int(np.prod(p.shape)) * 4
                        for p, loc in zip(self.trainer.params, self.trainer.local_mask)
                        if not loc
                    )
                )
                if D > 1
                else 0
            ),
        )

    def train_step(self, step: int) -> dict:
        res = self.trainer.train_step(step)
        if self.expert_comm_step[1]:
            self.ctx.count_collective(*self.expert_comm_step)
        if self.tp_comm_step[1]:
            self.ctx.count_collective(*self.tp_comm_step)
        res.pop("_stats")  # global sums (all ranks); the analyzers sum per-rank counts themselves
        local = np.rint(res.pop("_local_stats")).astype(np.int64)
        aux = res.pop("_aux_loss_sum") / max(1, self.L * self.D * self.TP)
        res.update(aux_loss=float(aux))
        if self.tp_index == 0:  # the other slices routed the same tokens: counted once
            res.update(
                tokens_per_expert=[int(v) for v in local[: self.E]],
                dropped_tokens=int(local[self.E]),
                tokens_routed=int(local[: self.E].sum()),
            )
        return res


def build(ctx):
    return MoEWorkload(ctx)
