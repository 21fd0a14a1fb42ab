"""Rule `tensor_parallel_comm`: "tensor-parallel all-reduce is X% of the step".

Input: `comm_exposure_classes` (per rank, step and traffic class: exposed_us, time_us; analyzers.analyses.comm_exposure)
and the step time (`steps` table: end_us - start_us per rank and step; else `summary["step_time_s"]`), the run
config's `parallel.tensor_parallel` for the knob, and for what the knob adds the run config's layout and model and the
optimizer's update ops (`ops_for_checks`: one per parameter tensor per step). The share is the mean over ranks and
steps of the tensor-parallel collectives' exposed time (time no compute overlaps) over the step time. Above
`TP_SHARE` it is a finding, above `TP_SHARE_HIGH` high severity.

Its knob is half the tensor-parallel size T (half the per-replica batch with it, keeping the global batch). Its gain
is the exposed tensor-parallel time less what the knob adds (`added_collectives`): with T/2 the data-parallel size D
doubles, and where D was 1 the fix's step carries collectives the original has none of: the gradient all-reduce of
the replicated weights (one per replicated tensor unfused, one flat buffer with comm_fusion `all`, a pipeline or
a tensor-parallel layout) and the MoE's expert dispatch / combine over the D replicas (2 per micro-batch and MoE
block, 3 times: forward, re-materialized forward, backward). Each is priced at what a tensor-parallel all-reduce of
this run cost (its exposed time per collective): on the host CPU a small collective's cost is its latency and its
ranks' scheduling, not its bytes. Where D was already > 1 the fix issues the same collectives as before (larger), and
nothing is added. When the gain is not positive the finding keeps no knob: lowering T does not pay.
"""

from __future__ import annotations

import math

import pandas as pd

from analyzers.analyses.advice.common import table
from analyzers.analyses.advice.rule import CONFIG_KEY, Rule
from workloads.parallel.layout_math import (
    capacity,
    comm_bytes_per_call,
    moe_layer_costs,
    moe_tp_comm_per_microbatch,
    stage_bounds,
)

ID = "tensor_parallel_comm"

#: exposed tensor-parallel communication above this share of the step is a finding ...
TP_SHARE = 0.2
#: ... and above this, high severity
TP_SHARE_HIGH = 0.4
#: the optimizer's update ops (MindSpore kernels): one per parameter tensor per step
OPTIMIZER_OPS = ("ApplyMomentum", "AdamWeightDecay", "Adam", "ApplyAdam")
#: weight tensors of one MoE block's experts (w1, b1, w2, b2: workloads/moe), never all-reduced over data parallel
EXPERT_TENSORS_PER_BLOCK = 4


def _step_ms(tables: dict, summary: dict) -> pd.Series | float | None:
    st = (tables or {}).get("steps")
    if isinstance(st, pd.DataFrame) and len(st) and {"rank", "step", "start_us", "end_us"} <= set(st.columns):
        d = (pd.to_numeric(st["end_us"], errors="coerce") - pd.to_numeric(st["start_us"], errors="coerce")) / 1000.0
        return pd.Series(
            d.to_numpy(), index=pd.MultiIndex.from_arrays([st["rank"].astype(int), st["step"].astype(int)])
        )
    s = (summary or {}).get("step_time_s")
    return float(s) * 1000.0 if isinstance(s, (int, float)) and s > 0 else None


def _share(tables: dict, summary: dict):
    """(mean share of the step, mean step ms, exposed ms per rank and step) of the tensor-parallel collectives, or
    None when there are none or the step time is unknown."""
    ex = (tables or {}).get("comm_exposure_classes")
    if not isinstance(ex, pd.DataFrame) or ex.empty or "comm_class" not in ex.columns:
        return None
    tp = ex[ex["comm_class"] == "tensor_parallel"]
    if tp.empty:
        return None
    per = tp.groupby([tp["rank"].astype(int), tp["step"].astype(int)])["exposed_us"].sum() / 1000.0  # ms
    step = _step_ms(tables, summary or {})
    if step is None:
        return None
    if isinstance(step, pd.Series):
        step = step.reindex(per.index)
        ok = step.notna() & (step > 0)
        per, step = per[ok], step[ok]
        if per.empty:
            return None
        return float((per / step).mean()), float(step.mean()), per
    return float(per.mean() / step), step, per


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def tensors_per_step(tables) -> float | None:
    """Parameter tensors one rank's optimizer updates per step: its update ops (`OPTIMIZER_OPS`, one per tensor)
    per rank and step, the median; None when the ops table has none."""
    ops = table(tables, "ops_for_checks", "type", "rank", "step")
    if ops is None:
        return None
    upd = ops[ops["type"].astype(str).isin(OPTIMIZER_OPS)]
    if upd.empty:
        return None
    return float(upd.groupby(["rank", "step"]).size().median())


def _moe(cfg: dict) -> dict | None:
    """The MoE layout numbers the collectives' counts need (busiest stage's MoE blocks, micro-batches, tokens per
    micro-batch, capacity's inputs), None when the workload is not the MoE or a number is missing."""
    if cfg.get("workload") != "moe":
        return None
    m, par = cfg.get("model") or {}, cfg.get("parallel") or {}
    vals = {k: _int(m.get(k)) for k in ("num_layers", "num_experts", "top_k", "hidden_size", "seq_len")}
    S, M = _int(par.get("pipeline_stages", 1)) or 1, _int(par.get("micro_batches", 1)) or 1
    cf = m.get("capacity_factor")
    if any(v is None or v < 1 for v in vals.values()) or not isinstance(cf, (int, float)) or cf <= 0:
        return None
    L = vals["num_layers"]
    costs = moe_layer_costs(L)
    bounds = stage_bounds(costs, S, par.get("pipeline_split"))
    blocks = max(sum(1 for i in range(L) if lo <= i + 1 < hi) for lo, hi in bounds)
    return dict(vals, S=S, M=M, capacity_factor=float(cf), blocks=blocks)


def tp_collectives(cfg: dict, T: int, batch: int) -> int | None:
    """Tensor-parallel all-reduces one rank issues per step (workloads/moe: g and f around attention and around the
    experts, 2 per micro-batch and block, in the forward, the re-materialized forward and the backward)."""
    mo = _moe(cfg)
    if mo is None:
        return None
    tokens = batch // mo["M"] * mo["seq_len"]
    C = capacity(tokens, mo["num_experts"], mo["top_k"], mo["capacity_factor"])
    per_block = moe_tp_comm_per_microbatch(tokens, mo["hidden_size"], mo["num_experts"], C, T)[1]
    return 3 * mo["blocks"] * mo["M"] * per_block


def added_collectives(tables, cfg: dict, T: int, batch_fix: int | None) -> tuple[int, dict] | None:
    """(count, {traffic class: count}) of the collectives one rank issues per step with tensor_parallel T/2 (and
    the per-replica batch `batch_fix`) that it does not issue with T (module doc); None when unknown."""
    par = cfg.get("parallel") or {}
    world = _int(cfg.get("world_size"))
    S = _int(par.get("pipeline_stages", 1)) or 1
    if world is None or world % (S * T):
        return None
    D, T2 = world // (S * T), T // 2
    if D > 1:  # already data parallel: the fix issues the same collectives (larger), none more
        return 0, {}
    mo = _moe(cfg)
    if mo is None or batch_fix is None:
        return None
    D2 = world // (S * T2)
    impl = "allgather+allreduce" if S == 1 and T2 == 1 else "allreduce+allreduce"  # workloads.parallel.experts
    tokens = batch_fix // mo["M"] * mo["seq_len"]
    C = capacity(tokens, mo["num_experts"], mo["top_k"], mo["capacity_factor"])
    calls = comm_bytes_per_call(impl, D2, mo["num_experts"], C, mo["hidden_size"])[1]
    parts = {"expert_dispatch": 3 * mo["blocks"] * mo["M"] * calls}
    fusion = par.get("comm_fusion", 0)
    if S > 1 or T2 > 1 or fusion == "all":  # one flat buffer (workloads/parallel/rules.py, compression.py)
        parts["dp_grad"] = 1
    elif fusion == 0:  # one all-reduce per replicated tensor: every tensor but the experts'
        n = tensors_per_step(tables)
        if n is None:
            return None
        parts["dp_grad"] = max(int(round(n)) - EXPERT_TENSORS_PER_BLOCK * mo["blocks"], 0)
    else:  # buckets of comm_fusion MB: their count needs the tensors' sizes, which the tables do not carry
        return None
    return sum(parts.values()), parts


def net_gain(tp_ms: float, n_tp: int | None, added: tuple[int, dict] | None) -> float | None:
    """ms per step halving T saves: the exposed tensor-parallel time less the added collectives, each priced at
    what one tensor-parallel all-reduce of this run cost (tp_ms / n_tp); None when unknown."""
    if added is None:
        return None
    if added[0] == 0:
        return tp_ms
    if not n_tp:
        return None
    return tp_ms * (1.0 - added[0] / n_tp)


def halving_gain(tables, summary) -> float | None:
    """The net ms per step halving the tensor-parallel size (and the per-replica batch, where even) is predicted to
    save, unclipped (negative: the fix is predicted slower), as `find` computes it; None when unknown or when the run
    has no tensor-parallel finding's inputs. The calibration bench compares it with the measured change."""
    got = _share(tables, summary)
    cfg = (tables or {}).get(CONFIG_KEY) or {}
    T = _int((cfg.get("parallel") or {}).get("tensor_parallel"))
    B = _int((cfg.get("train") or {}).get("batch_size"))
    if got is None or not T or T < 2 or T % 2 or B is None:
        return None
    return _halving(tables, cfg, T, B, float(got[2].mean()))[2]


def _halving(tables, cfg: dict, T: int, B: int | None, tp_ms: float) -> tuple[int | None, tuple | None, float | None]:
    """(tensor-parallel collectives per step, what T/2 adds (`added_collectives`), the net gain (`net_gain`)) of
    halving T, with half the per-replica batch where B is even (the global batch kept)."""
    n_tp = tp_collectives(cfg, T, B) if B is not None else None
    batch_fix = B // 2 if B is not None and B >= 2 and B % 2 == 0 else B
    added = added_collectives(tables, cfg, T, batch_fix)
    return n_tp, added, net_gain(tp_ms, n_tp, added)


def find(tables, summary):
    got = _share(tables, summary)
    if got is None:
        return []
    share, step_ms, per = got
    tp_ms = float(per.mean())
    if not math.isfinite(share) or share <= TP_SHARE:
        return []
    cfg = tables.get(CONFIG_KEY) or {}
    T = _int((cfg.get("parallel") or {}).get("tensor_parallel")) or None
    lower = {"parallel.tensor_parallel": T // 2} if T and T >= 2 and T % 2 == 0 else None
    B = _int((cfg.get("train") or {}).get("batch_size"))
    if lower and B is not None and B >= 2 and B % 2 == 0:
        # half the tensor-parallel size doubles the data-parallel replicas; `batch_size` is per replica, so half of
        # it keeps the global batch (the step's work): otherwise the fix's step carries twice the samples
        lower["train.batch_size"] = B // 2
    gain = tp_ms
    basis = "upper bound: all exposed tensor-parallel all-reduce time per step goes with tensor_parallel=1"
    costs = ""
    if lower:
        assert T is not None
        n_tp, added, gain = _halving(tables, cfg, T, B, tp_ms)
        if added is None or (added[0] and not n_tp):
            basis = (
                f"unknown: what tensor_parallel={T // 2} adds (the data-parallel collectives of the doubled replicas) "
                "needs the world size, the MoE layout and the optimizer's update ops"
            )
        elif added[0] == 0:
            basis = (
                f"the exposed tensor-parallel all-reduce time per step (upper bound); tensor_parallel={T // 2} adds "
                "no collective (already data parallel)"
            )
        else:
            parts = ", ".join(f"{v} {k}" for k, v in added[1].items())
            per_coll = tp_ms / n_tp
            costs = (
                f"; tensor_parallel={T // 2} adds {added[0]} collectives per step ({parts}) at {per_coll:.2f} ms "
                f"each (this run's {n_tp} tensor-parallel all-reduces: {tp_ms:.2f} ms) -> net {gain:+.2f} ms"
            )
            basis = (
                f"exposed tensor-parallel time {tp_ms:.1f} ms x (1 - {added[0]} added / {n_tp} tensor-parallel "
                f"collectives per step) = {gain:.1f} ms"
            )
        if gain is not None and gain <= 0:
            lower, gain = None, 0.0
    ranks = sorted(int(r) for r in per.index.get_level_values(0).unique())
    remedy = (
        "lower parallel.tensor_parallel (more data parallel instead) or keep each tensor-parallel group within a node"
        if lower or not costs
        else (
            f"lowering parallel.tensor_parallel would not pay (its data-parallel collectives cost more than the "
            f"{tp_ms:.1f} ms it removes): keep each tensor-parallel group within a node"
        )
    )
    return [
        {
            "key": "run",
            "severity": "high" if share > TP_SHARE_HIGH else "medium",
            "message": (
                f"Tensor-parallel all-reduce is {share:.0%} of the step ({tp_ms:.1f} ms exposed per step"
                + (f", tensor_parallel={T}" if T else "")
                + f"): {remedy} (its all-reduces run twice per transformer block in forward and in backward)."
            ),
            "evidence": (
                f"comm_exposure_classes[comm_class=tensor_parallel]: {tp_ms:.2f} ms exposed per rank and step "
                f"(mean over {len(per)} rank-steps) / step {step_ms:.2f} ms = {share:.2f} (> {TP_SHARE})" + costs
            ),
            "ranks": ranks,
            "stage": None,
            "gain_ms": gain,
            "explains": "exposed",
            "basis": basis,
            "try": lower,
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("comm_exposure_classes", "steps", "ops_for_checks", CONFIG_KEY),
    thresholds={"TP_SHARE": TP_SHARE, "TP_SHARE_HIGH": TP_SHARE_HIGH},
    fires=(
        "the tensor-parallel collectives' exposed time (`comm_exposure_classes`) is > `TP_SHARE` of the step, mean "
        "over ranks and steps (high above `TP_SHARE_HIGH`); evidence: exposed ms per rank and step / step ms"
    ),
    gain=(
        "the tensor-parallel collectives' exposed time per step (mean over ranks and steps) × (1 − the collectives "
        "T/2 adds / the tensor-parallel collectives per step): where the data-parallel size was 1, the doubled "
        "replicas' gradient all-reduces and the MoE's expert dispatch, each priced at one tensor-parallel "
        "all-reduce's exposed time; 0 and no knob when not positive, unknown when the layout or the tensor count "
        "is; without the run config, the exposed time (an upper bound)"
    ),
    knobs=("parallel.tensor_parallel", "train.batch_size"),
    tries=(
        '`{"parallel.tensor_parallel": T/2, "train.batch_size": B/2}` (T even; the batch halved where it is even: '
        "twice the data-parallel replicas keep the global batch, so the fix's step does the same work), predicted "
        "step = step − gain; none when the gain is not positive"
    ),
)
