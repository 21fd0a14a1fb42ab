"""Pipeline parallelism on a host loop: stage partitioning, GPipe / 1F1B execution, micro-batch accumulation.

Layout: ``world_size = S x D x T``; rank r is stage ``r // (D*T)``, data-parallel replica ``(r % (D*T)) // T``,
tensor-parallel slice ``r % T`` (``rules.stage_layout``; T = ``parallel.tensor_parallel``, 1 unless the workload
splits its layers, see ``tensor.py``).
Stage s of replica d talks to stage s+1 of replica d through a ``p2p`` link; the D replicas of a stage
all-reduce their gradients after the flush.  With S = 1 the same loop is plain gradient accumulation over
M micro-batches.

A workload hands over its model as an ordered list of cells (``layers``).  Each layer returns a tensor, or a
tuple ``(tensor, aux_loss, stats)`` (MoE: ``aux_loss`` a scalar added to the objective with ``aux_weight``,
``stats`` a float vector of ``stats_size`` counters, summed over layers, micro-batches and ranks per step).
The first stage's input is the micro-batch's input array, the last stage's output goes into ``loss_fn(out,
labels)``.

Backward of a stage re-runs its forward (re-materialization, as in GPipe): the stage's gradient function is
``d/d(x, W) [ sum(f(x) * dy) + aux_weight * aux(x) / M ]`` with ``dy`` received from the next stage, or
``d/d(x, W) [ (loss(f(x), labels) + aux_weight * aux) / M ]`` on the last stage.  With ``mode="graph"`` these
functions are ``ms.jit`` compiled; the schedule and the transfers run in PyNative (CPU Broadcast is
PyNative-only).

Spans written per step: ``forward``/``backward`` (mb, stage), ``send``/``recv`` (mb, stage), ``allreduce``
(gradient all-reduce of the stage's replicas), ``optimizer``.
"""

from __future__ import annotations

import math

import numpy as np

from workloads.optimizers import make_optimizer
from workloads.parallel.layout_math import stage_bounds
from workloads.parallel.p2p import make_link
from workloads.parallel.rules import layout_groups, stage_layout
from workloads.parallel.schedules import schedule as make_schedule


def world_group_name() -> str:
    from mindspore.communication import GlobalComm

    return GlobalComm.WORLD_COMM_GROUP


def create_groups(rank: int, world: int, stages: int, tp: int = 1):
    """``(prev_link, next_link, dp_group)`` of this rank, and ``tp_group`` as a fourth item when ``tp > 1``;
    links/groups it is not part of are None.

    Pairs ``(s, d, t) <-> (s+1, d, t)`` get a p2p link; the D replicas of a stage (tensor-parallel slice t)
    share ``dp_group`` (the world group when S = 1 and T = 1); the T slices of a replica share ``tp_group``.
    Names: ``rules.layout_groups``.  Every rank walks the same global order, so group creation cannot wait
    in a cycle.
    """

    prev_link = next_link = dp_group = tp_group = None
    if world <= 1:
        return (prev_link, next_link, dp_group) + ((tp_group,) if tp > 1 else ())
    from mindspore.communication import create_group

    per_stage = world // stages
    _, _, D = stage_layout(rank, world, stages, tp)
    for i in range(per_stage):
        for s in range(stages - 1):
            a, b = s * per_stage + i, (s + 1) * per_stage + i
            if rank == a:
                next_link = make_link(a, b)
            elif rank == b:
                prev_link = make_link(b, a)
    if D > 1 and stages == 1 and tp == 1:
        dp_group = world_group_name()
    for name, ranks in layout_groups(world, stages, tp).items():
        if rank not in ranks or name.startswith("pb_p2p_"):
            continue
        create_group(name, ranks)
        if name.startswith("pb_dp_"):
            dp_group = name
        elif name.startswith("pb_tp_"):
            tp_group = name
    return (prev_link, next_link, dp_group) + ((tp_group,) if tp > 1 else ())


def _build_stage_cell(ms, nn, ops, layers, stats_size: int):
    class Stage(nn.Cell):
        """This rank's contiguous slice of the model; returns (out, aux_loss, stats)."""

        def __init__(self):
            super().__init__(auto_prefix=False)
            self.layers = nn.CellList(layers)
            self.stats_size = max(1, stats_size)

        def construct(self, x):
            aux = ops.zeros((), ms.float32)
            stats = ops.zeros((self.stats_size,), ms.float32)
            for layer in self.layers:
                out = layer(x)
                if isinstance(out, tuple):
                    x = out[0]
                    aux = aux + out[1]
                    stats = stats + out[2]
                else:
                    x = out
            return x, aux, stats

    return Stage()


class PipelineTrainer:
    """Runs one training step of this rank's stage: schedule, transfers, accumulation, all-reduce, optimizer."""

    def __init__(
        self,
        ctx,
        layers,
        loss_fn,
        batch_fn,
        *,
        samples_per_microbatch: int,
        layer_costs=None,
        local_param_filter=None,
        aux_weight: float = 0.0,
        stats_size: int = 0,
        optimizer=None,
        dp_reducer_factory=None,
        groups=None,
    ):
        import mindspore as ms
        from mindspore import nn, ops

        self.ms, self.ops, self.ctx = ms, ops, ctx
        cfg = ctx.config
        par = cfg["parallel"]
        self.S = int(par.get("pipeline_stages", 1) or 1)
        self.M = int(par.get("micro_batches", 1) or 1)
        self.schedule_name = str(par.get("pipeline_schedule", "1f1b"))
        self.T = int(par.get("tensor_parallel", 1) or 1)
        self.rank, self.world = ctx.rank, ctx.world_size
        self.stage, self.dp_index, self.D = stage_layout(self.rank, self.world, self.S, self.T)
        self.tp_index = self.rank % self.T
        self.first, self.last = self.stage == 0, self.stage == self.S - 1
        self.batch_fn = batch_fn
        self.samples_per_mb = int(samples_per_microbatch)
        self.aux_weight = float(aux_weight)
        self.stats_size = int(stats_size)
        self.jit = cfg["train"]["mode"] == "graph"
        # Transfers and host-side collectives are PyNative-only on CPU; stage functions are jit-compiled instead.
        ms.set_context(mode=ms.PYNATIVE_MODE)

        stale = ctx.output_dir / "metrics" / ".pipeline_ready" / f"rank{self.rank}"
        if stale.exists():  # left by an earlier attempt in the same output_dir
            stale.unlink()

        costs = list(layer_costs) if layer_costs is not None else [1.0] * len(layers)
        self.bounds = stage_bounds(costs, self.S, par.get("pipeline_split"))
        lo, hi = self.bounds[self.stage]
        self.stage_layers = (lo, hi)
        self.cell = _build_stage_cell(ms, nn, ops, list(layers)[lo:hi], stats_size)
        self.cell.set_train()
        self.params = self.cell.trainable_params()
        local = local_param_filter or (lambda p: False)
        self.local_mask = [bool(local(p)) for p in self.params]
        if optimizer is None:
            self.opt = make_optimizer(self.params, cfg["train"])
        else:
            self.opt = optimizer(self.params)
        self.loss_fn = loss_fn

        # --- communication groups (the workload may have created them already, to build its layers) ----------
        if groups is None:
            groups = create_groups(self.rank, self.world, self.S, self.T)
        self.prev_link, self.next_link, self.dp_group = groups[:3]
        self.tp_group = groups[3] if len(groups) > 3 else None
        self.world_group = world_group_name() if self.world > 1 else None

        # --- gradient all-reduce over the stage's data-parallel replicas ------------------------------------
        shared = [tuple(p.shape) for p, loc in zip(self.params, self.local_mask) if not loc]
        self.reducer, self.reducer_info, self.reducer_comm = None, {}, []
        if self.D > 1 and shared:
            if dp_reducer_factory is not None and self.S == 1 and self.T == 1:
                self.reducer, self.reducer_info, self.reducer_comm = dp_reducer_factory(shared, self.D)
            else:
                nbytes = sum(int(math.prod(s)) * 4 for s in shared)
                self.reducer_info = {"fusion_impl_used": "perfbench (one flat all-reduce per stage group)"}
                self.reducer_comm = [(nbytes, 1)]

        self._build_functions()
        self.in_shape = self._negotiate_shapes()
        if self.S > 1:
            self._warm_up()
        self.actions = make_schedule(self.schedule_name, self.S, self.M, self.stage)
        ctx.set_meta(
            pipeline_stages=self.S,
            micro_batches=self.M,
            pipeline_schedule=self.schedule_name,
            stage=self.stage,
            dp_index=self.dp_index,
            dp_size=self.D,
            tensor_parallel=self.T,
            tp_index=self.tp_index,
            dp_group=self.dp_group,
            tp_group=self.tp_group,
            parallel_groups={
                n: {"ranks": r, "kind": n.split("_")[1], "source": "workload", "label": n}
                for n, r in layout_groups(self.world, self.S, self.T).items()
                if not n.startswith("pb_p2p_")
            },
            stage_layers=[lo, hi],
            stage_bounds=self.bounds,
            p2p_impl=(self.prev_link or self.next_link).kind if (self.prev_link or self.next_link) else None,
            stage_params=int(sum(int(np.prod(p.shape)) for p in self.params)),
            pipeline_exec="pynative host loop" + (" + ms.jit stage functions" if self.jit else ""),
            ideal_bubble_fraction=(self.S - 1) / (self.M + self.S - 1),
            **self.reducer_info,
        )

    # ------------------------------------------------------------------------------------------------------
    def _build_functions(self):
        ms = self.ms
        cell, loss_fn, M, aw = self.cell, self.loss_fn, float(self.M), self.aux_weight
        wrap = ms.jit if self.jit else (lambda f: f)

        if self.last:

            def fwd(x, labels):
                y, aux, stats = cell(x)
                return loss_fn(y, labels), aux, stats

            def obj(x, labels):
                y, aux, _ = cell(x)
                return (loss_fn(y, labels) + aw * aux) / M
        else:

            def fwd(x):
                return cell(x)

            def obj(x, dy):
                y, aux, _ = cell(x)
                return (y * dy).sum() + aw * aux / M

        self.fwd = wrap(fwd)
        self.bwd = wrap(ms.value_and_grad(obj, grad_position=None if self.first else 0, weights=self.params))

    @staticmethod
    def _sync(*tensors):
        """Wait for results so spans time the work (ms.runtime.synchronize() is unsupported on CPU)."""
        for t in tensors:
            t.asnumpy()

    def _negotiate_shapes(self):
        """Each stage learns the shape of the activation it receives (header sent once, at build time)."""
        ms = self.ms
        if self.S == 1:
            return None
        in_shape = None
        if not self.first:
            hdr = self.prev_link.recv((9,), ms.float32).asnumpy()
            in_shape = tuple(int(v) for v in hdr[1 : 1 + int(hdr[0])])
        if not self.last:
            x = self._input(0, 0) if self.first else ms.ops.zeros(in_shape, ms.float32)
            y = self.fwd(x)[0]
            shape = tuple(y.shape)
            if len(shape) > 8:
                raise ValueError(f"activation of stage {self.stage} has {len(shape)} dims (at most 8 supported)")
            hdr = np.zeros(9, np.float32)
            hdr[0] = len(shape)
            hdr[1 : 1 + len(shape)] = shape
            self.next_link.send(ms.Tensor(hdr))
            self.out_shape = shape
        return in_shape

    def _warm_up(self):
        """Compile this stage's functions now, then wait for every rank (file barrier in output_dir).

        MindSpore's CPU AllReduce gives up after ~30 s of waiting ("Ring ReduceScatter wait receiving
        failed"); compiling a stage's gradient can take longer than that on a loaded machine, and the
        other stages would wait for it inside step 0.  The dry run changes no weights (its gradients
        are dropped).  Same-host ranks only: on several hosts without a shared output_dir the barrier
        times out after ``PERFBENCH_PP_BARRIER_S`` (default 600 s) and training starts anyway.
        """
        import os
        import time as _time

        ms = self.ms
        x = self._input(0, 0) if self.first else ms.ops.zeros(self.in_shape, ms.float32)
        if self.last:
            labels = ms.Tensor(self.batch_fn(0, 0)[1])
            self._sync(self.fwd(x, labels)[0], self.bwd(x, labels)[0])
        else:
            self._sync(self.bwd(x, ms.ops.zeros(self.out_shape, ms.float32))[0])
        d = self.ctx.output_dir / "metrics" / ".pipeline_ready"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank{self.rank}").write_text(str(_time.time()))
        deadline = _time.time() + float(os.environ.get("PERFBENCH_PP_BARRIER_S", "600"))
        while _time.time() < deadline:
            if all((d / f"rank{r}").exists() for r in range(self.world)):
                break
            _time.sleep(0.2)

    def _input(self, step, mb):
        x, _ = self.batch_fn(step, mb)
        return self.ms.Tensor(x)

    # ------------------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict:
        ms, ctx, st = self.ms, self.ctx, self.stage
        f32 = ms.float32
        x_in: dict[int, object] = {}
        labels: dict[int, object] = {}
        dys: dict[int, object] = {}
        dxs: dict[int, object] = {}
        acts: dict[int, object] = {}
        grads = None
        loss_sum = 0.0
        stats_sum = np.zeros(max(1, self.stats_size), np.float64)
        aux_sum = 0.0

        def do_send(link, t, mb):
            with ctx.span("send", mb=mb, stage=st):
                link.send(t)

        def do_recv(link, shape, mb):
            with ctx.span("recv", mb=mb, stage=st):
                return link.recv(shape, f32)

        for a in self.actions:
            op, mb = a.op, a.mb
            if op == "recv_fwd":
                x_in[mb] = do_recv(self.prev_link, self.in_shape, mb)
            elif op == "forward":
                if self.first:
                    x, y_lab = self.batch_fn(step, mb)
                    x_in[mb] = ms.Tensor(x)
                else:
                    _, y_lab = self.batch_fn(step, mb) if self.last else (None, None)
                with ctx.span("forward", mb=mb, stage=st):
                    if self.last:
                        labels[mb] = ms.Tensor(y_lab)
                        loss, aux, stats = self.fwd(x_in[mb], labels[mb])
                        loss_sum += float(loss.asnumpy())
                    else:
                        y, aux, stats = self.fwd(x_in[mb])
                        acts[mb] = y
                    aux_sum += float(aux.asnumpy())
                    stats_sum += stats.asnumpy()
                    if not self.last:
                        self._sync(y)
            elif op == "send_fwd":
                do_send(self.next_link, acts.pop(mb), mb)
            elif op == "recv_bwd":
                dys[mb] = do_recv(self.next_link, self.out_shape, mb)
            elif op == "send_fwd_recv_bwd":
                if self.next_link.rank < self.next_link.peer:
                    do_send(self.next_link, acts.pop(mb), mb)
                    dys[a.mb2] = do_recv(self.next_link, self.out_shape, a.mb2)
                else:  # not reached with the contiguous layout (lower stage = lower rank); kept for safety
                    dys[a.mb2] = do_recv(self.next_link, self.out_shape, a.mb2)
                    do_send(self.next_link, acts.pop(mb), mb)
            elif op == "backward":
                with ctx.span("backward", mb=mb, stage=st):
                    second = labels.pop(mb) if self.last else dys.pop(mb)
                    val, g = self.bwd(x_in.pop(mb), second)
                    if self.first:
                        gw = g
                    else:
                        dxs[mb], gw = g
                    grads = list(gw) if grads is None else [acc + gi for acc, gi in zip(grads, gw)]
                    self._sync(val, grads[-1])
            elif op == "send_bwd":
                do_send(self.prev_link, dxs.pop(mb), mb)
            elif op == "send_bwd_recv_fwd":
                if self.prev_link.rank > self.prev_link.peer:
                    x_in[a.mb2] = do_recv(self.prev_link, self.in_shape, a.mb2)
                    do_send(self.prev_link, dxs.pop(mb), mb)
                else:
                    do_send(self.prev_link, dxs.pop(mb), mb)
                    x_in[a.mb2] = do_recv(self.prev_link, self.in_shape, a.mb2)
            else:
                raise RuntimeError(f"unknown pipeline action {op!r}")

        grads = self._reduce(grads)
        with ctx.span("optimizer", stage=st):
            self.opt(tuple(grads))
            self._sync(self.params[-1])

        for link in (self.prev_link, self.next_link):
            if link is not None and link.transfers:
                ctx.count_collective(link.bytes_sent, link.transfers)
                link.bytes_sent = link.transfers = 0

        # One small all-reduce of the step's numbers so every rank reports the global loss and counters.
        vec = np.concatenate([[loss_sum / self.M if self.last else 0.0, aux_sum / self.M], stats_sum])
        if self.world > 1:
            from mindspore.mint import distributed as dist

            t = ms.Tensor(vec.astype(np.float32))
            dist.all_reduce(t, group=self.world_group)
            ctx.count_collective(t.nbytes, 1)
            vec = t.asnumpy().astype(np.float64)
            vec[0] /= self.D * self.T  # mean over the last stage's replicas (the T slices hold the same loss)
        return {
            "loss": float(vec[0]),
            # the T slices of a replica train the same samples: counted once, by slice 0
            "samples": self.samples_per_mb * self.M if self.last and self.tp_index == 0 else 0,
            "_aux_loss_sum": float(vec[1]),
            "_stats": vec[2 : 2 + self.stats_size],
            "_local_stats": stats_sum[: self.stats_size],
        }

    def _reduce(self, grads):
        if self.D == 1:
            return grads
        ops, st = self.ops, self.stage
        shared_idx = [i for i, loc in enumerate(self.local_mask) if not loc]
        out = list(grads)
        with self.ctx.span("allreduce", stage=st):
            if shared_idx:
                shared = tuple(grads[i] for i in shared_idx)
                if self.reducer is not None:
                    red = self.reducer(shared)
                else:
                    from mindspore.mint import distributed as dist

                    flat = ops.concat([g.reshape(-1) for g in shared])
                    dist.all_reduce(flat, group=self.dp_group)
                    flat = flat / float(self.D)
                    red, off = [], 0
                    for g in shared:
                        n = int(np.prod(g.shape))
                        red.append(flat[off : off + n].reshape(g.shape))
                        off += n
                for i, r in zip(shared_idx, red):
                    out[i] = r
            # expert weights live on one rank: their gradient already sums every replica's tokens
            for i, loc in enumerate(self.local_mask):
                if loc:
                    out[i] = grads[i] / float(self.D)
            self._sync(*out[-1:])
        for nbytes, n in self.reducer_comm:
            self.ctx.count_collective(nbytes, n)
        return out
