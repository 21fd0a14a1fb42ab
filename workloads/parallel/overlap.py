"""``parallel.overlap_grad_comm: true``: gradient all-reduce overlapped with backward (PyNative only).

Every trainable parameter gets a PyNative gradient hook (``Parameter.register_hook``).  Buckets are planned as
for ``comm_fusion`` (``workloads.parallel.bucketing.plan_buckets``, reverse parameter order = the order backward
produces gradients).  When the last gradient of a bucket arrives its hook flattens the bucket and issues
``mindspore.mint.distributed.all_reduce(buf, async_op=True)``, which runs on MindSpore's communication thread
while backward goes on computing the earlier layers.  After backward every handle is waited for (in issue
order), the buffers are averaged and split back, and the optimizer runs.

Spans (``metrics/rank{R}.spans.jsonl``): ``backward`` = the forward+backward call, ``allreduce`` = one per
bucket from its issue in the hook to the end of its ``wait()`` (an upper bound of its transfer: the handle is
only asked after backward), ``allreduce_wait`` = after backward, until the last handle completed: the
communication backward did not hide (exposed).  Every rank issues the buckets in the same order (backward
is deterministic), so the collectives match across ranks.
"""

from __future__ import annotations

import math
import time

from workloads.parallel.bucketing import plan_buckets


class OverlapTrainStep:
    def __init__(self, ctx, net_loss, opt, shapes, comm_fusion, world_size: int):
        import mindspore as ms
        from mindspore import mint

        self.ms, self.ctx, self.opt = ms, ctx, opt
        self.ws = int(world_size)
        self.params = list(opt.parameters)
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        nbytes = [int(math.prod(s)) * 4 for s in self.shapes]
        self.buckets = plan_buckets(nbytes, comm_fusion)
        self.bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b}
        self.info = {
            "buckets": len(self.buckets),
            "bucket_sizes_bytes": [sum(nbytes[i] for i in b) for b in self.buckets],
            "compression_ratio_measured": 1.0,
            "overlap_impl": "pynative hooks + async all_reduce",
        }
        self.comm = [(sum(nbytes), len(self.buckets))]
        self._all_reduce = mint.distributed.all_reduce
        self._net_loss = net_loss
        self._grad_fn = ms.value_and_grad(net_loss, None, self.params)
        for i, p in enumerate(self.params):
            p.register_hook(self._hook(i))
        self._reset()

    def _reset(self):
        self._ready: dict[int, object] = {}
        self._left = [len(b) for b in self.buckets]
        self._issued: list[tuple[int, object, object, float]] = []  # (bucket, buffer, handle, issue_ts)

    def _hook(self, i: int):
        def hook(grad):
            self._ready[i] = grad
            k = self.bucket_of[i]
            self._left[k] -= 1
            if self._left[k] == 0:
                self._issue(k)

        return hook

    def _issue(self, k: int):
        ops = self.ms.ops
        b = self.buckets[k]
        buf = self._ready[b[0]].reshape(-1) if len(b) == 1 else ops.cat([self._ready[i].reshape(-1) for i in b])
        buf = buf.copy() if len(b) == 1 else buf  # all_reduce works in place: never on the autograd's own tensor
        handle = self._all_reduce(buf, async_op=True)
        self._issued.append((k, buf, handle, time.time()))

    def set_train(self, mode: bool = True):
        self._net_loss.set_train(mode)  # BatchNorm: batch statistics while training
        return self

    def __call__(self, x, y):
        ctx = self.ctx
        self._reset()
        t0 = time.time()
        loss, _ = self._grad_fn(x, y)
        t1 = time.time()
        if len(self._issued) != len(self.buckets):  # a parameter without gradient: reduce what is left now
            for k in range(len(self.buckets)):
                if k not in {j for j, *_ in self._issued}:
                    for i in self.buckets[k]:
                        self._ready.setdefault(i, self.ms.ops.zeros(self.shapes[i], self.ms.float32))
                    self._issue(k)
        grads: list = [None] * len(self.params)
        ends = []
        for k, buf, handle, issued in self._issued:
            handle.wait()
            ends.append((k, issued, time.time()))
            flat = buf / self.ws
            off = 0
            for i in self.buckets[k]:
                n = int(math.prod(self.shapes[i]))
                grads[i] = flat[off : off + n].reshape(self.shapes[i])
                off += n
        t2 = time.time()
        self.opt(tuple(grads))
        t3 = time.time()
        for kind, a, b in [("backward", t0, t1), ("allreduce_wait", t1, t2), ("optimizer", t2, t3)] + [
            ("allreduce", s, e) for _, s, e in ends
        ]:
            ctx.add_span(kind, a, b)
        return loss
