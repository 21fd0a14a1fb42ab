"""ResNet-50 data-parallel workload (bottleneck 3-4-6-3, configurable width/depth) on synthetic or folder data.

Gradient path, chosen by ``parallel``:
  * ``fusion_impl: mindspore`` - DATA_PARALLEL context + ``nn.TrainOneStepCell`` (MindSpore's DistributedGradReducer),
    ``comm_fusion`` passed as MindSpore's own ``comm_fusion={"allreduce": {"mode": "size", "config": MB}}``.
  * ``fusion_impl: perfbench`` - ``workloads.parallel.bucketing`` (our buckets) and ``workloads.parallel.compression``
    (``grad_compression``: none | fp16 | powersgd).
"""

from __future__ import annotations

import math
import time

import numpy as np

from perfbench.errors import ConfigError
from workloads.data import make_image_data

COMPRESSIONS = ("none", "fp16", "powersgd", "topk")
FUSION_IMPLS = ("perfbench", "mindspore")


def _check(cfg: dict) -> dict:
    par = dict(cfg.get("parallel") or {})
    par.setdefault("grad_compression", "none")
    par.setdefault("compression_ratio", 0.01)
    par.setdefault("comm_fusion", 0)
    par.setdefault("fusion_impl", "perfbench")
    if par["grad_compression"] not in COMPRESSIONS:
        raise ConfigError(f"parallel.grad_compression must be one of {', '.join(COMPRESSIONS)}, "
                          f"got {par['grad_compression']!r}")
    if par["fusion_impl"] not in FUSION_IMPLS:
        raise ConfigError(f"parallel.fusion_impl must be one of {', '.join(FUSION_IMPLS)}, got {par['fusion_impl']!r}")
    if par["fusion_impl"] == "mindspore" and par["grad_compression"] != "none":
        raise ConfigError("parallel.grad_compression needs fusion_impl 'perfbench' (MindSpore's own gradient "
                          f"reducer cannot compress); got grad_compression={par['grad_compression']!r} "
                          "with fusion_impl='mindspore'")
    r = par["compression_ratio"]
    if par["grad_compression"] in ("powersgd", "topk") and (not isinstance(r, (int, float)) or not 0 < r < 1):
        raise ConfigError(f"parallel.compression_ratio must be a number in (0, 1), got {r!r}")
    if int(par.get("pipeline_stages", 1) or 1) != 1:
        raise ConfigError("workload resnet50 is data-parallel only: parallel.pipeline_stages must be 1")
    m = cfg["model"]
    for k in ("image_size", "num_classes", "width", "layers"):
        if k not in m:
            raise ConfigError(f"model.{k} is missing for workload resnet50")
    if not isinstance(m["layers"], (list, tuple)) or not m["layers"] or any(int(n) < 1 for n in m["layers"]):
        raise ConfigError(f"model.layers must be a list of positive block counts, got {m['layers']!r}")
    return par


class ResNetWorkload:
    def __init__(self, ctx):
        import mindspore as ms
        from mindspore import nn

        from workloads.parallel.bucketing import parse_fusion
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

        self.net = ResNet(tuple(int(n) for n in m["layers"]), int(m["width"]), int(m["num_classes"]))
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.net_loss = nn.WithLossCell(self.net, loss)
        params = self.net.trainable_params()
        self.opt = nn.Momentum(params, learning_rate=float(t.get("lr", 0.05)), momentum=float(t.get("momentum", 0.9)))
        shapes = [tuple(p.shape) for p in params]
        grad_bytes = [int(math.prod(s)) * 4 for s in shapes]
        self.uncompressed = int(sum(grad_bytes))
        self.step_comm = []  # (bytes, n) counted every step

        if par["fusion_impl"] == "mindspore" or ws == 1:
            self.train = nn.TrainOneStepCell(self.net_loss, self.opt)
            impl = "mindspore" if ws > 1 else "none (world_size 1)"
            if ws > 1:
                # MindSpore fuses by its own rules: bytes are known, the op count is read from the profile.
                self.step_comm.append((self.uncompressed, None))
            reducer_info = {"fusion_impl_used": impl,
                            "mindspore_comm_fusion": ms.get_auto_parallel_context("comm_fusion") if ws > 1 else None}
        else:
            from workloads.parallel.compression import make_reducer

            reducer, info, comm = make_reducer(par, shapes, ws)
            self.step_comm.extend(comm)
            self.train = _CustomTrainStep(self.net_loss, self.opt, reducer)
            reducer_info = dict(info, fusion_impl_used="perfbench")
        self.train.set_train()
        if ws > 1 and ms.get_context("mode") == ms.GRAPH_MODE:
            # compile before the first collective, then wait for every rank (see RunContext.barrier)
            t0 = time.time()
            size = int(m["image_size"])
            x = np.zeros((self.batch, 3, size, size), np.float32)
            y = np.zeros((self.batch,), np.int32)
            self.train.compile(ms.Tensor(x), ms.Tensor(y))
            compile_s = time.time() - t0
            ctx.set_meta(compile_s=compile_s, compile_barrier_wait_s=ctx.barrier("compiled"))
        ratio_used = par["grad_compression"] in ("powersgd", "topk")
        meta = dict(params=param_count(self.net), param_tensors=len(params), grad_compression=par["grad_compression"],
                    compression_ratio_configured=par["compression_ratio"] if ratio_used else None,
                    comm_fusion=par["comm_fusion"], fusion_impl=par["fusion_impl"],
                    bytes_per_step_uncompressed=self.uncompressed if ws > 1 else 0,
                    bytes_per_step=sum(b for b, _ in self.step_comm),
                    collectives_per_step=(None if any(n is None for _, n in self.step_comm)
                                          else sum(n for _, n in self.step_comm)),
                    expert_comm=None,
                    # element size on the wire (read by the ingest to turn profiled shapes into bytes)
                    comm_dtype_bytes=2 if par["grad_compression"] == "fp16" else 4)
        meta.update(reducer_info)
        ctx.set_meta(**meta)

    def train_step(self, step: int) -> dict:
        ms = self.ms
        x, y = self.data.batch(step)
        loss = self.train(ms.Tensor(x), ms.Tensor(y)).asnumpy()
        for nbytes, n in self.step_comm:
            self.ctx.count_collective(nbytes, n)
        return {"loss": float(np.asarray(loss).reshape(-1)[0]), "samples": self.batch}


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


def build(ctx):
    return ResNetWorkload(ctx)
