"""The Mixture-of-Experts transformer language model in plain PyTorch, the same layout as the MindSpore one
(workloads/moe/model.py):

    Embedding(tokens + positions) -> N x Block(pre-LN causal self-attention, pre-LN MoE FFN) -> Head(LN, vocab)

MoE FFN (GShard / Switch style): router `Linear(H, E)` without bias, softmax, top-k experts per token with gates
renormalised over the k; slot-major priority (every token's first choice before any second choice); each expert
takes at most `C = ceil(capacity_factor * N * k / E)` slots per rank and micro-batch (N tokens), the rest are
dropped (the residual carries the token). Auxiliary load-balancing loss `E * sum_e f_e * P_e`. Each block returns
`(x, aux_loss, stats)`, stats = routed slots per expert (E, before the capacity cut) and the dropped slots.

Expert parallel (`ep = (group size W, this rank r)`): rank r holds experts `r*E/W .. (r+1)*E/W - 1`; the
dispatch buffer `[E, C, H]` goes through one `all_to_all_single` to the experts' owners and one back (autograd
runs the reverse all-to-alls in backward). gloo runs `all_to_all_single` on CPU tensors. Every rank draws the full
expert weights from the seed and keeps its share, so the model is the same for any W.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.parallel.layout_math import capacity


class _AllToAll(torch.autograd.Function):
    """`torch.distributed.all_to_all_single` with even splits; its gradient is the same exchange backwards."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        import torch.distributed as dist

        ctx.group = group
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return _AllToAll.apply(grad.contiguous(), ctx.group), None


def _all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """`x` split evenly along dim 0 among the group's ranks, exchanged (with autograd)."""
    return _AllToAll.apply(x, group)


class Attention(nn.Module):
    def __init__(self, H: int, heads: int, T: int):
        super().__init__()
        self.qkv, self.proj = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.nh, self.hd, self.T = heads, H // heads, T
        self.register_buffer("mask", torch.triu(torch.full((T, T), -1e9), diagonal=1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, T, H = x.shape
        qkv = self.qkv(x).reshape(b, T, 3, self.nh, self.hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.hd) + self.mask, dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, T, H))


class MoE(nn.Module):
    def __init__(self, H: int, F_: int, E: int, k: int, C: int, seed: int, index: int, ep=None):
        super().__init__()
        self.router = nn.Linear(H, E, bias=False)
        self.E, self.k, self.C = E, k, C
        self.W, r, self.group = (1, 0, None) if ep is None else ep
        El = E // self.W
        g = torch.Generator().manual_seed(seed * 7919 + index)
        w1 = torch.randn(E, H, F_, generator=g) / math.sqrt(H)
        w2 = torch.randn(E, F_, H, generator=g) / math.sqrt(F_)
        self.w1 = nn.Parameter(w1[r * El : (r + 1) * El].clone())
        self.b1 = nn.Parameter(torch.zeros(El, 1, F_))
        self.w2 = nn.Parameter(w2[r * El : (r + 1) * El].clone())
        self.b2 = nn.Parameter(torch.zeros(El, 1, H))

    def expert_parameters(self) -> list[nn.Parameter]:
        return [self.w1, self.b1, self.w2, self.b2]

    def forward(self, x: torch.Tensor):
        b, T, H = x.shape
        N, E, k, C = b * T, self.E, self.k, self.C
        xf = x.reshape(N, H)
        probs = torch.softmax(self.router(xf), dim=-1)  # [N, E]
        topv, topi = probs.topk(k, dim=-1)
        gates = topv / topv.sum(-1, keepdim=True)
        m = F.one_hot(topi, E).to(x.dtype).transpose(0, 1).reshape(k * N, E)  # slot-major priority
        pos = (m.cumsum(0) - 1.0) * m
        keep = m * (pos < C).to(x.dtype)
        slot = F.one_hot(pos.clamp(0, C - 1).long(), C).to(x.dtype) * keep.unsqueeze(-1)  # [kN, E, C]
        disp = slot.reshape(k, N, E * C).sum(0)  # [N, E*C], 0/1
        comb = (slot * gates.transpose(0, 1).reshape(k * N, 1, 1)).reshape(k, N, E * C).sum(0)
        buf = (disp.transpose(0, 1) @ xf).reshape(E, C, H)
        if self.W > 1:  # to the experts' owners: [W (source rank), El, C, H] -> [El, W*C, H]
            El = E // self.W
            buf = _all_to_all(buf, self.group).reshape(self.W, El, C, H).transpose(0, 1).reshape(El, self.W * C, H)
        out = torch.bmm(F.gelu(torch.bmm(buf, self.w1) + self.b1), self.w2) + self.b2
        if self.W > 1:  # back: [El, W, C, H] -> [W, El, C, H] -> each source rank's [E, C, H]
            El = E // self.W
            out = _all_to_all(out.reshape(El, self.W, C, H).transpose(0, 1).reshape(E, C, H), self.group)
        y = comb @ out.reshape(E * C, H)
        routed = m.sum(0)  # [E], before the capacity cut
        aux = (routed / float(N * k) * probs.mean(0)).sum() * float(E)
        dropped = float(N * k) - keep.sum()
        return y.reshape(b, T, H), aux, torch.cat([routed, dropped.reshape(1)]).detach()


class Block(nn.Module):
    def __init__(self, H, heads, T, F_, E, k, C, seed, index, ep):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(H), Attention(H, heads, T)
        self.ln2, self.moe = nn.LayerNorm(H), MoE(H, F_, E, k, C, seed, index, ep)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        y, aux, stats = self.moe(self.ln2(x))
        return x + y, aux, stats


class MoETransformer(nn.Module):
    """Embedding -> `num_layers` blocks -> head; `forward(ids)` returns (logits, mean aux loss, stats per layer)."""

    def __init__(
        self,
        *,
        vocab_size=512,
        seq_len=32,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        num_experts=4,
        top_k=2,
        capacity_factor=1.25,
        ffn_hidden_size=None,
        tokens=256,
        seed=0,
        ep=None,
    ):
        super().__init__()
        V, T, H = vocab_size, seq_len, hidden_size
        if ep is not None and num_experts % ep[0]:
            raise ValueError(f"num_experts {num_experts} is not divisible by the expert-parallel size {ep[0]}")
        self.capacity = capacity(tokens, num_experts, top_k, capacity_factor)
        self.tok = nn.Embedding(V, H)
        self.pos = nn.Parameter(torch.randn(1, T, H, generator=torch.Generator().manual_seed(seed)) * 0.02)
        F_ = ffn_hidden_size or 2 * H
        self.blocks = nn.ModuleList(
            Block(H, num_heads, T, F_, num_experts, top_k, self.capacity, seed, i, ep) for i in range(num_layers)
        )
        self.ln, self.out = nn.LayerNorm(H), nn.Linear(H, V)

    def expert_parameter_names(self) -> list[str]:
        return [f"blocks.{i}.moe.{n}" for i in range(len(self.blocks)) for n in ("w1", "b1", "w2", "b2")]

    def forward(self, ids: torch.Tensor):
        x = self.tok(ids) + self.pos
        auxes, stats = [], []
        for block in self.blocks:
            x, aux, st = block(x)
            auxes.append(aux)
            stats.append(st)
        return self.out(self.ln(x)), torch.stack(auxes).mean(), stats
