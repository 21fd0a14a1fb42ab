"""A small Mixture-of-Experts transformer language model (MindSpore), as a list of pipeline layers.

    Embedding(tokens + positions) -> N x Block(pre-LN causal self-attention, pre-LN MoE FFN) -> Head(LN, vocab)

MoE FFN (GShard / Switch style): router ``Dense(H, E)``, softmax, top-k experts per token with gates
renormalized over the k; slot priority is slot-major (every token's first choice before any second
choice), each expert takes at most ``C = ceil(capacity_factor * N * k / E)`` slots per rank and
micro-batch (N tokens), the rest are dropped (their slot contributes nothing; the residual carries the
token).  Auxiliary load-balancing loss ``E * sum_e f_e * P_e`` (f_e: share of routed slots, P_e: mean router
probability).  Each MoE layer returns ``(x, aux_loss, stats)``, stats = ``[routed slots per expert (E), dropped
slots]`` counted before the capacity cut, so ``sum(stats[:E]) == N * k``.
"""

from __future__ import annotations

import math

import numpy as np

from workloads.parallel.layout_math import capacity
from workloads.parallel.tensor import column_slice, qkv_rows


def build_layers(m: dict, *, tokens: int, seq_len: int, seed: int, ep_for_layer, tp=None):
    """Return ``(layers, costs, expert_param_names)``.

    ``ep_for_layer(i) -> (dispatch, combine, ep_size, ep_rank)`` gives the expert communication for MoE
    block i (block index from 0), or None to build the block with every expert local (a block that
    lives on another pipeline stage: built only so every rank draws the same initial weights).
    ``tp = (make_f_g, T, t)``: tensor parallel over T ranks, this rank t (``workloads.parallel.tensor``;
    ``make_f_g()`` returns a fresh pair of Megatron's f / g Cells); None: no tensor parallelism.
    """
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn, ops

    V, T, H = int(m["vocab_size"]), int(m["seq_len"]), int(m["hidden_size"])
    L, nh, E, k = int(m["num_layers"]), int(m["num_heads"]), int(m["num_experts"]), int(m["top_k"])
    F = int(m.get("ffn_hidden_size") or 2 * H)
    cf = float(m["capacity_factor"])
    C = capacity(tokens, E, k, cf)
    hd = H // nh
    make_f_g, TP, tpr = tp if tp is not None and tp[1] > 1 else (None, 1, 0)

    class Embedding(nn.Cell):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, H)
            self.pos = Parameter(
                Tensor(np.random.default_rng(seed).normal(0, 0.02, (1, T, H)).astype(np.float32)), name="pos_embedding"
            )

        def construct(self, ids):
            return self.tok(ids) + self.pos

    class Attention(nn.Cell):
        def __init__(self, index=0):
            super().__init__()
            qkv, proj = nn.Dense(H, 3 * H), nn.Dense(H, H)  # the full layers, drawn alike for every T
            self.tp = TP > 1
            if self.tp:  # column-parallel Q/K/V (this rank's heads), row-parallel output projection
                rows, cols = qkv_rows(H, TP, tpr), column_slice(H, TP, tpr)
                self.qkv_w = Parameter(Tensor(qkv.weight.asnumpy()[rows]), name=f"attn{index}.qkv_tp.weight")
                self.qkv_b = Parameter(Tensor(qkv.bias.asnumpy()[rows]), name=f"attn{index}.qkv_tp.bias")
                self.proj_w = Parameter(Tensor(proj.weight.asnumpy()[:, cols]), name=f"attn{index}.proj_tp.weight")
                self.proj_b = Parameter(Tensor(proj.bias.asnumpy()), name=f"attn{index}.proj.bias")
                self.tp_f, self.tp_g = make_f_g()
            else:
                self.qkv, self.proj = qkv, proj
            self.nh = nh // TP
            mask = np.triu(np.full((T, T), -1e9, np.float32), k=1)
            self.mask = Tensor(mask)
            self.scale = 1.0 / math.sqrt(hd)
            self.softmax = nn.Softmax(axis=-1)

        def construct(self, x):
            b = x.shape[0]
            if self.tp:
                xf = self.tp_f(x.reshape(b * T, H))
                qkv = ops.matmul(xf, self.qkv_w.transpose(1, 0)) + self.qkv_b
            else:
                qkv = self.qkv(x.reshape(b * T, H))
            qkv = qkv.reshape(b, T, 3, self.nh, hd).transpose(2, 0, 3, 1, 4)
            q, kk, v = qkv[0], qkv[1], qkv[2]  # [b, nh / TP, T, hd]
            att = ops.matmul(q, kk.transpose(0, 1, 3, 2)) * self.scale + self.mask
            att = self.softmax(att)
            y = ops.matmul(att, v).transpose(0, 2, 1, 3).reshape(b * T, self.nh * hd)
            if self.tp:
                return (self.tp_g(ops.matmul(y, self.proj_w.transpose(1, 0))) + self.proj_b).reshape(b, T, H)
            return self.proj(y).reshape(b, T, H)

    class MoE(nn.Cell):
        def __init__(self, index, ep):
            super().__init__()
            self.router = nn.Dense(H, E, has_bias=False)
            if ep is None:
                self.dispatch, self.combine, W, r = None, None, 1, 0
            else:
                self.dispatch, self.combine, W, r = ep
            El = E // W
            rng = np.random.default_rng([seed, 7919, index])
            w1 = rng.normal(0, 1 / math.sqrt(H), (E, H, F)).astype(np.float32)[r * El : (r + 1) * El]
            w2 = rng.normal(0, 1 / math.sqrt(F), (E, F, H)).astype(np.float32)[r * El : (r + 1) * El]
            Fl = F // TP
            self.tp = TP > 1
            if self.tp:  # column-parallel w1 (F / T columns), row-parallel w2 (the matching rows)
                cols = column_slice(F, TP, tpr)
                w1, w2 = np.ascontiguousarray(w1[:, :, cols]), np.ascontiguousarray(w2[:, cols, :])
                self.tp_f, self.tp_g = make_f_g()
            self.w1 = Parameter(Tensor(w1), name=f"experts{index}.w1")
            self.b1 = Parameter(Tensor(np.zeros((El, 1, Fl), np.float32)), name=f"experts{index}.b1")
            self.w2 = Parameter(Tensor(w2), name=f"experts{index}.w2")
            self.b2 = Parameter(Tensor(np.zeros((El, 1, H), np.float32)), name=f"experts{index}.b2")
            self.softmax = nn.Softmax(axis=-1)
            self.gelu = nn.GELU()
            self.C = C

        def construct(self, x):
            b = x.shape[0]
            N = b * T
            xf = x.reshape(N, H)
            probs = self.softmax(self.router(xf))  # [N, E]
            topv, topi = ops.topk(probs, k)  # [N, k]
            gates = topv / topv.sum(-1, keepdims=True)
            mask = ops.one_hot(topi, E, Tensor(1.0, ms.float32), Tensor(0.0, ms.float32))  # [N, k, E]
            m = mask.transpose(1, 0, 2).reshape(k * N, E)  # slot-major priority
            pos = (ops.cumsum(m, 0) - 1.0) * m  # position of each slot in its expert's queue
            keep = m * (pos < self.C).astype(ms.float32)
            pos_i = ops.clip(pos, 0, self.C - 1).astype(ms.int32)
            slot = ops.one_hot(pos_i, self.C, Tensor(1.0, ms.float32), Tensor(0.0, ms.float32))  # [kN, E, C]
            slot = slot * keep.reshape(k * N, E, 1)
            disp = slot.reshape(k, N, E * self.C).sum(0)  # [N, E*C], 0/1
            g = gates.transpose(1, 0).reshape(k * N, 1, 1)
            comb = (slot * g).reshape(k, N, E * self.C).sum(0)  # [N, E*C]
            buf = ops.matmul(disp.transpose(1, 0), xf).reshape(E, self.C, H)
            if self.dispatch is not None:
                buf = self.dispatch(buf)  # [El, W*C, H]
            if self.tp:
                h = self.gelu(ops.bmm(self.tp_f(buf), self.w1) + self.b1)
                out = self.tp_g(ops.bmm(h, self.w2)) + self.b2
            else:
                h = self.gelu(ops.bmm(buf, self.w1) + self.b1)
                out = ops.bmm(h, self.w2) + self.b2
            if self.combine is not None:
                out = self.combine(out)  # [E, C, H]
            y = ops.matmul(comb, out.reshape(E * self.C, H))
            routed = m.sum(0)  # [E], before the capacity cut
            frac = routed / float(N * k)
            aux = (frac * probs.mean(0)).sum() * float(E)
            dropped = float(N * k) - keep.sum()
            stats = ops.concat((routed, dropped.reshape(1)))
            return y.reshape(b, T, H), aux, stats

    class Block(nn.Cell):
        def __init__(self, index, ep):
            super().__init__()
            self.ln1 = nn.LayerNorm((H,))
            self.attn = Attention(index)
            self.ln2 = nn.LayerNorm((H,))
            self.moe = MoE(index, ep)

        def construct(self, x):
            x = x + self.attn(self.ln1(x))
            y, aux, stats = self.moe(self.ln2(x))
            return x + y, aux, stats

    class Head(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm((H,))
            self.out = nn.Dense(H, V)

        def construct(self, x):
            b = x.shape[0]
            return self.out(self.ln(x).reshape(b * T, H)).reshape(b, T, V)

    layers = [Embedding()]
    for i in range(L):
        layers.append(Block(i, ep_for_layer(i)))
    layers.append(Head())
    costs = [0.25] + [1.0] * L + [0.5]
    return layers, costs, C


def build_loss():
    from mindspore import nn

    class LMLoss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

        def construct(self, logits, labels):
            V = logits.shape[-1]
            return self.ce(logits.reshape(-1, V), labels.reshape(-1))

    return LMLoss()


class SyntheticTokens:
    """Learnable synthetic sequences: x[t+1] = (a * x[t] + c) mod V with a per-sequence random (a, c) from a
    small set, and 10% random tokens.  One replica's batch is drawn per (seed, step, data-parallel index) and
    cut into ``micro_batches`` slices, so micro-batching never changes the data a step trains on."""

    def __init__(self, vocab: int, seq_len: int, batch: int, seed: int, dp_index: int, micro_batches: int = 1):
        if batch % micro_batches:
            raise ValueError(f"batch {batch} is not divisible by micro_batches {micro_batches}")
        self.V, self.T, self.B, self.seed, self.dp = vocab, seq_len, batch, seed, dp_index
        self.M = micro_batches
        self._cache: tuple[int, np.ndarray, np.ndarray] | None = None

    def _full(self, step: int):
        if self._cache is None or self._cache[0] != step:
            rng = np.random.default_rng([self.seed, step, self.dp])
            a = rng.choice([1, 3, 5, 7], size=(self.B, 1))
            c = rng.integers(1, 4, size=(self.B, 1))
            x = np.empty((self.B, self.T + 1), np.int64)
            x[:, 0] = rng.integers(0, self.V, self.B)
            for t in range(self.T):
                x[:, t + 1] = (a[:, 0] * x[:, t] + c[:, 0]) % self.V
            noise = rng.random((self.B, self.T + 1)) < 0.1
            x = np.where(noise, rng.integers(0, self.V, x.shape), x)
            self._cache = (step, x[:, :-1].astype(np.int32), x[:, 1:].astype(np.int32))
        return self._cache[1], self._cache[2]

    def batch(self, step: int, mb: int = 0):
        """(tokens, next tokens) of micro-batch ``mb``: ``[batch / micro_batches, seq_len]`` int32 each."""
        x, y = self._full(step)
        n = self.B // self.M
        return x[mb * n : (mb + 1) * n], y[mb * n : (mb + 1) * n]
