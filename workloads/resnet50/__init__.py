"""ResNet-50 data-parallel workload (bottleneck 3-4-6-3, configurable width/depth) on synthetic or folder data.

Gradient path, chosen by ``parallel``:
  * ``fusion_impl: mindspore`` - DATA_PARALLEL context + ``nn.TrainOneStepCell`` (MindSpore's DistributedGradReducer),
    ``comm_fusion`` passed as MindSpore's own ``comm_fusion={"allreduce": {"mode": "size", "config": MB}}``.
  * ``fusion_impl: perfbench`` - ``workloads.parallel.bucketing`` (our buckets) and ``workloads.parallel.compression``
    (``grad_compression``: none | fp16 | powersgd).

Pipeline / micro-batches (``parallel.pipeline_stages`` S > 1 or ``micro_batches`` M > 1): the model is handed to
``workloads.parallel.pipeline.PipelineTrainer`` as ``[stem, every bottleneck block, head]`` (costs: estimated
MACs, ``resnet_layer_costs``), GPipe or 1F1B over M micro-batches of ``train.batch_size / M`` images; with S = 1
this is gradient accumulation.  ``world_size = S x D``: replica d of every stage reads the data of "rank" d
(so the first and the last stage of a replica see the same images and labels), only last-stage ranks count
``samples``.  D > 1 replicas all-reduce their gradients after the flush: with S = 1 through ``make_reducer``
(all ``grad_compression`` / ``comm_fusion`` options), with S > 1 one flat all-reduce per stage group.
Note: BatchNorm normalizes over each micro-batch, so M > 1 is not bit-equal to M = 1 (see docs/workloads.md).
"""

from __future__ import annotations

import math
import time

import numpy as np

from perfbench.errors import ConfigError
from workloads.data import make_image_data
from workloads.optimizers import make_optimizer
from workloads.parallel.bucketing import parse_fusion
from workloads.parallel.compression import make_reducer
from workloads.parallel.layout_math import resnet_layer_costs
from workloads.parallel.overlap import OverlapTrainStep
from workloads.parallel.pipeline import PipelineTrainer, create_groups
from workloads.parallel.precision import OVERFLOW_BOOST, LossScaleTrainStep, apply_precision
from workloads.parallel.rules import parallel_layout
from workloads.parallel.zero import ZeroSync, ZeroTrainStep, shard_owners

COMPRESSIONS = ("none", "fp16", "powersgd", "topk")
FUSION_IMPLS = ("perfbench", "mindspore")


def _check(cfg: dict) -> dict:
    par = dict(cfg.get("parallel") or {})
    par.setdefault("grad_compression", "none")
    par.setdefault("compression_ratio", 0.01)
    par.setdefault("comm_fusion", 0)
    par.setdefault("fusion_impl", "perfbench")
    if par["grad_compression"] not in COMPRESSIONS:
        raise ConfigError(
            f"parallel.grad_compression must be one of {', '.join(COMPRESSIONS)}, got {par['grad_compression']!r}"
        )
    if par["fusion_impl"] not in FUSION_IMPLS:
        raise ConfigError(f"parallel.fusion_impl must be one of {', '.join(FUSION_IMPLS)}, got {par['fusion_impl']!r}")
    if par["fusion_impl"] == "mindspore" and par["grad_compression"] != "none":
        raise ConfigError(
            "parallel.grad_compression needs fusion_impl 'perfbench' (MindSpore's own gradient "
            f"reducer cannot compress); got grad_compression={par['grad_compression']!r} "
            "with fusion_impl='mindspore'"
        )
    r = par["compression_ratio"]
    if par["grad_compression"] in ("powersgd", "topk") and (not isinstance(r, (int, float)) or not 0 < r < 1):
        raise ConfigError(f"parallel.compression_ratio must be a number in (0, 1), got {r!r}")
    m = cfg["model"]
    for k in ("image_size", "num_classes", "width", "layers"):
        if k not in m:
            raise ConfigError(f"model.{k} is missing for workload resnet50")
    if not isinstance(m["layers"], (list, tuple)) or not m["layers"] or any(int(n) < 1 for n in m["layers"]):
        raise ConfigError(f"model.layers must be a list of positive block counts, got {m['layers']!r}")
    return par


def recompute_blocks(net, compiled: bool) -> None:
    """train.recompute: every bottleneck block recomputes its activations in backward instead of keeping them.

    Compiled (``train.mode: graph``: the data-parallel step, or the pipeline trainer's ``ms.jit`` stage functions):
    ``cell.recompute()`` (the compiler drops the block's inner outputs and recomputes them in backward).  Eager
    (``train.mode: pynative``), where ``cell.recompute()`` has no effect: each block runs through
    ``mindspore.recompute`` (``workloads.resnet50.model.Recomputed``), which keeps only the block's input."""
    from mindspore import nn

    from workloads.resnet50.model import Recomputed

    if compiled:
        for block in net.blocks:
            block.recompute()
    else:
        net.blocks = nn.SequentialCell([Recomputed(b) for b in net.blocks])


def _pipelined(cfg: dict) -> bool:
    par = cfg.get("parallel") or {}
    return int(par.get("pipeline_stages", 1) or 1) > 1 or int(par.get("micro_batches", 1) or 1) > 1


class ResNetWorkload:
    def __init__(self, ctx):
        import mindspore as ms
        from mindspore import nn

        from workloads.resnet50.model import ResNet, param_count

        self.ctx = ctx
        cfg = ctx.config
        par = _check(cfg)
        m, t = cfg["model"], cfg["train"]
        ws = ctx.world_size
        self.ms = ms
        self.batch = int(t["batch_size"])
        self.data = make_image_data(t, m, ctx.rank, ws)
        fusion_mb = parse_fusion(par["comm_fusion"])

        if par["fusion_impl"] == "mindspore" and ws > 1:
            kw = dict(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
            if fusion_mb is None:
                kw["comm_fusion"] = {"allreduce": {"mode": "size", "config": 1 << 20}}  # one buffer
            elif fusion_mb > 0:
                kw["comm_fusion"] = {"allreduce": {"mode": "size", "config": max(1, int(round(fusion_mb)))}}
            ms.set_auto_parallel_context(**kw)

        self.precision = str(t.get("precision", "fp32"))
        self.overflow_step = (cfg.get("inject") or {}).get("overflow_step")
        self.net = ResNet(tuple(int(n) for n in m["layers"]), int(m["width"]), int(m["num_classes"]))
        if t.get("recompute"):
            recompute_blocks(self.net, compiled=t.get("mode", "graph") == "graph")
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        # AMP O2 for fp16 (weights and gradients stay fp32, the loss runs on fp32 logits)
        self.net_loss = nn.WithLossCell(apply_precision(self.net, self.precision), loss)
        params = self.net.trainable_params()
        shapes = [tuple(p.shape) for p in params]
        grad_bytes = [int(math.prod(s)) * 4 for s in shapes]
        self.uncompressed = int(sum(grad_bytes))
        self.step_comm = []  # (bytes, n) counted every step
        self.sync = None
        zero = int(par.get("zero_stage") or 0)
        zero_info = {
            "zero_stage": zero,
            "optimizer": t.get("optimizer") or "momentum",
            "recompute": bool(t.get("recompute")),
            "zero_shard_params": None,
        }
        self.overlap = bool(par.get("overlap_grad_comm")) and ws > 1

        if zero and ws > 1:
            from mindspore import ParameterTuple

            numels = [int(math.prod(s)) for s in shapes]
            owners = shard_owners(numels, ws)
            keep = {i for i, o in enumerate(owners) if o == ctx.rank} if zero == 2 else None
            reducer, info, comm = make_reducer(par, shapes, ws, keep=keep)
            self.step_comm.extend(comm)
            mine = sum(n for n, o in zip(numels, owners) if o == ctx.rank)
            # the owners' broadcasts: this rank sends its shard (op count set once the sync cell exists)
            self.train = ZeroTrainStep(
                self.net_loss,
                ParameterTuple(params),
                owners,
                ctx.rank,
                lambda ps: make_optimizer(ps, t),
                reducer,
                zero,
            )
            self.sync = ZeroSync(params, owners)
            self.step_comm.append((mine * 4, self.sync.broadcasts))
            reducer_info = dict(info, fusion_impl_used="perfbench")
            zero_info["zero_shard_params"] = mine
        elif self.precision == "fp16":
            reducer, reducer_info = None, {"fusion_impl_used": "none (world_size 1)"}
            if ws > 1:
                reducer, info, comm = make_reducer(par, shapes, ws)
                self.step_comm.extend(comm)
                reducer_info = dict(info, fusion_impl_used="perfbench")
            self.opt = make_optimizer(params, t)
            self.train = LossScaleTrainStep(
                self.net_loss,
                self.opt,
                reducer,
                float(t.get("loss_scale", 2.0**16)),
                int(t.get("loss_scale_window", 1000)),
            )
        elif self.overlap:
            self.opt = make_optimizer(params, t)
            self.train = OverlapTrainStep(ctx, self.net_loss, self.opt, shapes, par["comm_fusion"], ws)
            self.step_comm.extend(self.train.comm)
            reducer_info = dict(self.train.info, fusion_impl_used="perfbench")
        elif par["fusion_impl"] == "mindspore" or ws == 1:
            self.opt = make_optimizer(params, t)
            self.train = nn.TrainOneStepCell(self.net_loss, self.opt)
            impl = "mindspore" if ws > 1 else "none (world_size 1)"
            if ws > 1:
                # MindSpore fuses by its own rules: bytes are known, the op count is read from the profile.
                self.step_comm.append((self.uncompressed, None))
            reducer_info = {
                "fusion_impl_used": impl,
                "mindspore_comm_fusion": ms.get_auto_parallel_context("comm_fusion") if ws > 1 else None,
            }
        else:
            reducer, info, comm = make_reducer(par, shapes, ws)
            self.step_comm.extend(comm)
            self.opt = make_optimizer(params, t)
            self.train = _CustomTrainStep(self.net_loss, self.opt, reducer)
            reducer_info = dict(info, fusion_impl_used="perfbench")
        self.train.set_train()
        if ws > 1 and ms.get_context("mode") == ms.GRAPH_MODE:
            # compile before the first collective, then wait for every rank (see RunContext.barrier)
            t0 = time.time()
            size = int(m["image_size"])
            x = np.zeros((self.batch, 3, size, size), np.float32)
            y = np.zeros((self.batch,), np.int32)
            self.train.compile(ms.Tensor(x), ms.Tensor(y), *self._extra_args(-1))
            compile_s = time.time() - t0
            ctx.set_meta(compile_s=compile_s, compile_barrier_wait_s=ctx.barrier("compiled"))
        ratio_used = par["grad_compression"] in ("powersgd", "topk")
        meta = dict(
            params=param_count(self.net),
            param_tensors=len(params),
            grad_compression=par["grad_compression"],
            compression_ratio_configured=par["compression_ratio"] if ratio_used else None,
            comm_fusion=par["comm_fusion"],
            fusion_impl=par["fusion_impl"],
            bytes_per_step_uncompressed=self.uncompressed if ws > 1 else 0,
            bytes_per_step=sum(b for b, _ in self.step_comm),
            collectives_per_step=(
                None if any(n is None for _, n in self.step_comm) else sum(n for _, n in self.step_comm)
            ),
            expert_comm=None,
            precision=self.precision,
            overlap_grad_comm=self.overlap,
            loss_scale_init=float(t.get("loss_scale", 2.0**16)) if self.precision == "fp16" else None,
            # element size on the wire (read by the ingest to turn profiled shapes into bytes); AMP keeps
            # fp32 gradients, so train.precision does not change it
            comm_dtype_bytes=2 if par["grad_compression"] == "fp16" else 4,
        )
        meta.update(reducer_info)
        meta.update(zero_info)
        ctx.set_meta(**meta)

    def checkpoint_cell(self):
        """What the runner checkpoints (train.checkpoint_every): weights and the optimizer's momenta."""
        return self.train

    def train_step(self, step: int) -> dict:
        ms = self.ms
        x, y = self.data.batch(step)
        out = self.train(ms.Tensor(x), ms.Tensor(y), *self._extra_args(step))
        extra = {}
        if self.precision == "fp16":
            loss, scale, overflow = out
            extra = {"loss_scale": float(scale.asnumpy()), "overflow": bool(overflow.asnumpy())}
        else:
            loss = out
        loss = np.asarray(loss.asnumpy())  # the step has run: the ZeRO owners broadcast what they updated
        if self.sync is not None:
            self.sync()
        for nbytes, n in self.step_comm:
            self.ctx.count_collective(nbytes, n)
        return {"loss": float(loss.reshape(-1)[0]), "samples": self.batch, **extra}

    def _extra_args(self, step: int) -> tuple:
        """fp16: the loss-scale boost of this step (inject.overflow_step forces an overflow)."""
        if self.precision != "fp16":
            return ()

        boost = OVERFLOW_BOOST if self.overflow_step is not None and step == int(self.overflow_step) else 1.0
        return (self.ms.Tensor(boost, self.ms.float32),)


def _CustomTrainStep(net_loss, opt, reducer):
    from mindspore import nn, ops

    class CustomTrainStep(nn.Cell):
        def __init__(self):
            super().__init__(auto_prefix=False)
            self.network = net_loss
            self.optimizer = opt
            self.weights = opt.parameters
            self.grad = ops.GradOperation(get_by_list=True, sens_param=False)
            self.reducer = reducer

        def construct(self, x, y):
            loss = self.network(x, y)
            grads = self.grad(self.network, self.weights)(x, y)
            grads = self.reducer(grads)
            self.optimizer(grads)
            return loss

    return CustomTrainStep()


class ResNetPipelineWorkload:
    """ResNet through ``PipelineTrainer`` (S stages x D replicas, M micro-batches); spans come from the trainer."""

    def __init__(self, ctx):
        import mindspore as ms
        from mindspore import nn

        from workloads.resnet50.model import ResNet, param_count, pipeline_layers

        cfg = ctx.config
        par = _check(cfg)
        m, t = cfg["model"], cfg["train"]
        S, M, stage, dp_index, D = parallel_layout("resnet50", m, par, t, ctx.rank, ctx.world_size)
        self.ctx = ctx
        self.batch = int(t["batch_size"])
        mb = self.batch // M
        # replica d of every stage reads the same data: the first stage needs the images, the last the labels
        self.data = make_image_data(t, m, dp_index, D)
        self._cached = (None, None)

        def batch_fn(step, k):
            if self._cached[0] != step:
                self._cached = (step, self.data.batch(step))
            x, y = self._cached[1]
            return x[k * mb : (k + 1) * mb], y[k * mb : (k + 1) * mb]

        ms.set_context(mode=ms.PYNATIVE_MODE)  # host loop + CPU Broadcast need PyNative (see pipeline.py)
        groups = create_groups(ctx.rank, ctx.world_size, S)
        layers_cfg = tuple(int(n) for n in m["layers"])
        # every rank builds the whole net (same seed: same initial weights), then keeps its stage's layers
        net = ResNet(layers_cfg, int(m["width"]), int(m["num_classes"]))
        if t.get("recompute"):
            recompute_blocks(net, compiled=t.get("mode", "graph") == "graph")  # graph: ms.jit stage functions
        layers = pipeline_layers(net)
        costs = resnet_layer_costs(layers_cfg, int(m["width"]), int(m["image_size"]), int(m["num_classes"]))

        reducer_factory = None
        if S == 1 and D > 1:

            def reducer_factory(shapes, world):
                cell, info, comm = make_reducer(par, shapes, world)
                return cell, dict(info, fusion_impl_used="perfbench"), comm

        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.trainer = PipelineTrainer(
            ctx,
            layers,
            loss,
            batch_fn,
            samples_per_microbatch=mb,
            layer_costs=costs,
            dp_reducer_factory=reducer_factory,
            groups=groups,
        )
        shared_bytes = int(sum(int(np.prod(p.shape)) * 4 for p in self.trainer.params))
        ratio_used = par["grad_compression"] in ("powersgd", "topk")
        comm = self.trainer.reducer_comm
        ctx.set_meta(
            params=int(sum(int(np.prod(p.shape)) for p in self.trainer.params)),
            model_params=param_count(net),
            param_tensors=len(self.trainer.params),
            layer_costs_mmac=costs,
            samples_per_microbatch=mb,
            grad_compression=par["grad_compression"],
            compression_ratio_configured=par["compression_ratio"] if ratio_used else None,
            comm_fusion=par["comm_fusion"],
            fusion_impl=par["fusion_impl"],
            bytes_per_step_uncompressed=shared_bytes if D > 1 else 0,
            bytes_per_step=sum(b for b, _ in comm),
            collectives_per_step=(None if any(n is None for _, n in comm) else sum(n for _, n in comm)),
            expert_comm=None,
            comm_dtype_bytes=2 if par["grad_compression"] == "fp16" else 4,
            zero_stage=0,
            optimizer=t.get("optimizer") or "momentum",
            recompute=bool(t.get("recompute")),
        )

    def train_step(self, step: int) -> dict:
        res = self.trainer.train_step(step)
        for k in ("_stats", "_local_stats", "_aux_loss_sum"):
            res.pop(k, None)
        return res


def build(ctx):
    if _pipelined(ctx.config):
        return ResNetPipelineWorkload(ctx)
    return ResNetWorkload(ctx)
