"""``train.precision``: fp16 mixed precision through MindSpore's AMP with dynamic loss scaling.

* ``apply_precision(net, precision) -> net``: ``mindspore.amp.auto_mixed_precision(net, "O2", dtype=float16)`` for
  fp16 (MindSpore casts the cells to fp16 and keeps BatchNorm and the weights in fp32, so gradients reach the
  optimizer and the all-reduce as fp32), wrapped so that its output is cast to fp32 (the loss runs in fp32);
  fp32 returns the net as it is; bf16 is refused (the CPU backend has no bf16
  MatMul/Conv2D kernels; docs/workloads.md).
* ``LossScaleTrainStep``: one training step with a dynamic loss scale, the scheme of MindSpore's
  ``DynamicLossScaleUpdateCell`` (which as shipped needs ``NPUGetFloatStatusV2``, missing on CPU; the overflow
  check here is ``amp.all_finite``): backward runs with ``sens = scale``, the gradients are all-reduced (so an
  overflow on any rank reaches every rank, all ranks decide alike) and divided by the scale; if any is not
  finite the optimizer update is skipped and the scale halves (never below 1), else after ``window``
  consecutive finite steps the scale doubles.  ``boost`` multiplies the scale for one step
  (``inject.overflow_step``: 1e30 forces an overflow).  Returns ``(loss, scale used, overflow)``.
"""

from __future__ import annotations

from perfbench.errors import ConfigError

PRECISIONS = ("fp32", "fp16", "bf16")
#: bytes per element of the compute dtype (perfbench.predict reads the same table through docs; weights and
#: gradients stay fp32 master copies under AMP O2)
COMPUTE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
OVERFLOW_BOOST = 1e30


def apply_precision(net, precision: str):
    import mindspore as ms
    from mindspore import amp

    if precision == "fp32":
        return net
    if precision == "fp16":
        amp.auto_mixed_precision(net, "O2", dtype=ms.float16)
        return _Fp32Output()(net)
    raise ConfigError(
        f"train.precision={precision!r} cannot run on the MindSpore CPU backend "
        "(no bf16 MatMul/Conv2D kernels); use 'fp16' or 'fp32'"
    )


def _Fp32Output():
    import mindspore as ms
    from mindspore import nn, ops

    class Fp32Output(nn.Cell):
        """The fp16 net's logits cast to fp32: the loss (softmax cross-entropy) and its scaling run in fp32."""

        def __init__(self, net):
            super().__init__(auto_prefix=False)
            self.net = net

        def construct(self, x):
            return ops.cast(self.net(x), ms.float32)

    return Fp32Output


def _build_cell():
    import mindspore as ms
    from mindspore import Parameter, Tensor, amp, nn, ops

    def _unscale(inv, g):
        return g * ops.cast(inv, g.dtype)

    class LossScaleTrainStep(nn.Cell):
        def __init__(self, net_loss, opt, reducer, init_scale: float, window: int):
            super().__init__(auto_prefix=False)
            self.network = net_loss
            self.optimizer = opt
            self.weights = opt.parameters
            self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
            self.reducer = reducer
            self.has_reducer = reducer is not None
            self.loss_scale = Parameter(Tensor(float(init_scale), ms.float32), name="loss_scale", requires_grad=False)
            self.good_steps = Parameter(Tensor(0, ms.int32), name="loss_scale_good_steps", requires_grad=False)
            self.window = int(window)
            self.hyper_map = ops.HyperMap()

        def construct(self, x, y, boost):
            loss = self.network(x, y)
            scale = self.loss_scale * 1.0
            sens = ops.ones_like(loss) * scale * boost
            grads = self.grad(self.network, self.weights)(x, y, sens)
            if self.has_reducer:
                grads = self.reducer(grads)
            inv = 1.0 / (scale * boost)
            grads = self.hyper_map(ops.partial(_unscale, inv), grads)
            finite = amp.all_finite(grads)
            if finite:
                self.optimizer(grads)
            good = ops.select(finite, self.good_steps + 1, ops.zeros_like(self.good_steps))
            grow = good >= self.window
            new_scale = ops.select(finite, ops.select(grow, scale * 2.0, scale), ops.maximum(scale * 0.5, 1.0))
            ops.assign(self.good_steps, ops.select(grow, ops.zeros_like(good), good))
            ops.assign(self.loss_scale, new_scale)
            return loss, scale, ops.logical_not(finite)

    return LossScaleTrainStep


_CELL = None


def LossScaleTrainStep(net_loss, opt, reducer, init_scale: float, window: int):
    """Factory for the MindSpore Cell (keeps this module importable without MindSpore)."""
    global _CELL
    if _CELL is None:
        _CELL = _build_cell()
    return _CELL(net_loss, opt, reducer, init_scale, window)
