"""The step-time model: `predict(calibration, target, hardware) -> dict` (the calibration is fitted on runs by
perfbench/predict/fit.py: `fit(observations) -> Calibration`, `calibrate(store, names)`).

One rank's step (docs/predict.md derives each term):

    step = base + exposed communication + compression compute            (pipeline_stages S = 1)
    base = compute_scale x (contention(n) x base_ref x B / B_ref + [M > 1] x (fixed(n) + (M - 1) x per_microbatch(n)))

* base: the rank's time outside collectives (computing + free) for B samples per replica in M micro-batches.
  Fitted: base_ref from runs with M = 1 (step time minus their measured exposed communication), the cost
  of each extra micro-batch from runs with M > 1. World size enters only through batch semantics
  (`batch_size` is per replica) and, on the measured machine, a fitted per-rank slowdown when ranks share
  its cores (`contention`, 1 on hardware with a device per rank).
* communication: the collectives of comm.plan (buckets from comm_fusion, compression's bytes), each
  latency x ring hops + factor(op, n) x bytes / bandwidth on the link the hardware profile gives n ranks.
  Fitted on the measured machine from the runs' own collectives (least squares over runs of total
  collective time against total hops and total factor x bytes). Exposed: without overlap all of it (less
  the measured hidden share); with `overlap: window` a bucket starts when backward has produced it and
  the comm stream is free, and only what runs past the end of backward is exposed.
* compression compute: seconds per fp32 gradient byte, fitted per kind from runs that compress.
* S > 1: the pipeline schedule's own simulator (workloads/parallel/schedules.simulate) with per-stage
  forward/backward times of one micro-batch (1 : 2 split); the bubble is its makespan minus busy time.

Uncertainty: relative sigma = sqrt(step-time noise of the calibration runs^2 + the model's RMS relative
error on its own calibration runs^2); the interval is step x (1 -/+ 2 sigma).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


from perfbench.errors import UserError
from perfbench.predict import comm
from perfbench.predict.hardware import Hardware
from workloads.parallel.schedules import simulate

FWD_SHARE = 1.0 / 3.0  # forward : backward = 1 : 2 (backward computes two gradients per layer)


@dataclass
class Calibration:
    inputs: list[str]
    batch_ref: float  # B_ref: samples per replica per step in the runs base_ref comes from
    base_ref_s: float  # per-rank time outside collectives at B_ref, M = 1, one rank (contention 1)
    compute_share: float = 1.0  # computing / (computing + free) of that time
    per_microbatch_s: dict = field(default_factory=dict)  # world size -> extra time per micro-batch beyond the first
    microbatch_fixed_s: dict = field(default_factory=dict)  # world size -> fixed cost of the micro-batch path (M > 1)
    compression_s_per_byte: dict = field(default_factory=dict)  # kind -> s per fp32 gradient byte
    precision: str = "fp32"  # the precision base_ref was measured in
    tensor_bytes: list[float] | None = None  # fp32 gradient tensors, backward order
    machine: Hardware | None = None  # the measured machine, fitted
    noise: float = 0.0
    residual: float = 0.0
    reference: dict = field(default_factory=dict)  # settings --set starts from
    notes: list[str] = field(default_factory=list)
    workload: str = ""
    model: dict = field(default_factory=dict)  # model config of the runs (comm.layout_collectives)


def base_time(cal: Calibration, s: dict, hw: Hardware) -> tuple[float, list[str]]:
    """Per-rank time outside collectives and compression for S = 1 (see the module doc)."""
    why: list[str] = []
    n, M, B = int(s["world_size"]), int(s["micro_batches"]), float(s["batch_size"] or cal.batch_ref)
    cont, note = hw.contention_at(n) if hw.kind == "measured" else (1.0, None)
    if note:
        why.append(note)
    scale = hw.compute_scale if hw.compute_scale is not None else 1.0
    scale *= _precision_factor(cal, s, hw, why)
    extra = 0.0
    if M > 1:
        h, k, note = per_microbatch(cal, n, hw)
        if note:
            why.append(note)
        extra = k + (M - 1) * h
    return scale * (cont * cal.base_ref_s * B / cal.batch_ref + extra), why


def _precision_factor(cal: Calibration, s: dict, hw: Hardware, why: list[str]) -> float:
    """Per-rank compute in the target precision relative to the calibration's (hardware's precision_scale)."""
    want, have = str(s.get("precision") or cal.precision), cal.precision
    if hw.precisions is not None and want not in hw.precisions:
        raise UserError(
            f"precision={want!r}: {hw.name} has no kernels for it (it runs {', '.join(hw.precisions)})"
            + (
                "; the MindSpore CPU backend lacks bf16 MatMul/Conv2D (bf16 needs e.g. Ascend 910B)"
                if want == "bf16"
                else ""
            )
        )
    if want == have:
        return 1.0
    a, b = hw.precision_scale.get(want), hw.precision_scale.get(have, 1.0 if have == "fp32" else None)
    if a is None or b is None:
        why.append(
            f"precision {want}: {hw.name} has no measured compute factor against {have}, so per-rank compute "
            f"is kept as measured in {have} (a run in {want} among --from fits it)"
        )
        return 1.0
    why.append(f"precision {want}: per-rank compute x {a / b:.2f} against {have} ({hw.name}'s precision_scale)")
    return a / b


def per_microbatch(cal: Calibration, n: int, hw: Hardware) -> tuple[float, float, str | None]:
    """(per extra micro-batch, fixed cost of the micro-batch path) on n ranks: fitted at n, else at the
    nearest fitted world size, scaled by the per-rank compute factor between the two (measured machine)."""
    if not cal.per_microbatch_s:
        return 0.0, 0.0, "no calibration run used micro-batches: their extra cost is taken as 0"
    near = n if n in cal.per_microbatch_s else min(cal.per_microbatch_s, key=lambda k: (abs(k - n), k))
    h, k = cal.per_microbatch_s[near], cal.microbatch_fixed_s.get(near, 0.0)
    note = None
    if near != n:
        f = hw.contention_at(n)[0] / hw.contention_at(near)[0] if hw.kind == "measured" else 1.0
        h, k = h * f, k * f
        note = f"cost of extra micro-batches on {n} ranks taken from {near} ranks' runs"
    return h, k, note


def _by_class(colls, link) -> dict:
    """{traffic class: {count, bytes, time_s}} of one rank's collectives per step."""
    out: dict = {}
    for c in colls:
        e = out.setdefault(c.cls, {"count": 0, "bytes": 0.0, "time_s": 0.0})
        e["count"] += 1
        e["bytes"] += c.bytes
        if link is not None:
            e["time_s"] += sum(comm.cost(c, link.latency_us / 1e6, link.bandwidth_gbps * 1e9))
    return out


def comm_cost(cal: Calibration, s: dict, hw: Hardware, backward_s: float) -> dict:
    colls = comm.plan(s, cal.tensor_bytes or [])
    S = int(s.get("pipeline_stages") or 1)
    T = int(s.get("tensor_parallel") or 1)
    D = max(1, int(s["world_size"]) // (S * T))
    # tensor-parallel collectives run inside the compute, on its critical path: all exposed. Expert dispatch is
    # reported per class but not added (the calibration's base time already holds it)
    layout = comm.layout_collectives(cal.workload, cal.model, s)
    layout_link = hw.link(T) if T > 1 else (hw.link(int(s["world_size"])) if layout else None)
    layout_s = sum(
        sum(comm.cost(c, layout_link.latency_us / 1e6, layout_link.bandwidth_gbps * 1e9))
        for c in layout
        if c.cls == "tensor_parallel"
    )
    out = {
        "count": len(colls) + len(layout),
        "bytes": sum(c.bytes for c in colls + layout),
        "latency_terms": sum(comm.steps(c.op_type, c.n) for c in colls + layout),
        "latency_s": 0.0,
        "bytes_s": 0.0,
        "total_s": layout_s,
        "exposed_s": layout_s,
        "overlapped_s": 0.0,
        "link": None,
        "by_class": {**_by_class(colls, hw.link(D) if colls else None), **_by_class(layout, layout_link)},
    }
    if D > 1 and not cal.tensor_bytes:
        raise UserError(
            "the calibration runs tell nothing about the gradients' sizes (no run with collectives): "
            "add a run on 2 or more ranks to --from"
        )
    if not colls:
        return out
    link = hw.link(D)
    out["link"] = {"transport": link.transport, "bandwidth_gbps": link.bandwidth_gbps, "latency_us": link.latency_us}
    times = []
    for c in colls:
        lat, byt = comm.cost(c, link.latency_us / 1e6, link.bandwidth_gbps * 1e9)
        out["latency_s"] += lat
        out["bytes_s"] += byt
        times.append((c.ready_fraction, lat + byt))
    total = out["latency_s"] + out["bytes_s"]
    ov = s.get("overlap_grad_comm")  # None: what the hardware does by itself
    if ov is True or (ov is None and hw.overlap == "window"):
        end = 0.0
        for ready, t in times:  # buckets in backward order; the comm stream runs one at a time
            end = max(end, ready * backward_s) + t
        exposed = max(0.0, end - backward_s)
    else:  # after the whole backward: only what the hardware hid anyway (measured share) is not exposed
        exposed = total * (1.0 - (hw.overlap_fraction if hw.overlap == "none" else 0.0))
    out.update(total_s=total + layout_s, exposed_s=exposed + layout_s, overlapped_s=total - exposed)
    return out


def _check(s: dict) -> None:
    n, S, M = int(s["world_size"]), int(s["pipeline_stages"]), int(s["micro_batches"])
    T = int(s.get("tensor_parallel") or 1)
    if n < 1 or S < 1 or M < 1 or T < 1:
        raise UserError(
            f"world_size, pipeline_stages, micro_batches and tensor_parallel must be >= 1, got {n}, {S}, {M}, {T}"
        )
    if n % S:
        raise UserError(f"pipeline_stages={S} must divide world_size={n}")
    if n % (S * T):
        raise UserError(f"world_size={n} is not a multiple of pipeline_stages={S} x tensor_parallel={T}")
    if s["pipeline_schedule"] not in ("gpipe", "1f1b"):
        raise UserError(f"pipeline_schedule={s['pipeline_schedule']!r}: the model knows gpipe and 1f1b")
    if S > 1 and s["pipeline_schedule"] == "1f1b" and M < S:
        raise UserError(f"micro_batches={M} is less than pipeline_stages={S}, which 1F1B needs")


def _step(cal: Calibration, s: dict, hw: Hardware) -> dict:
    _check(s)
    why: list[str] = []
    S, M = int(s["pipeline_stages"]), int(s["micro_batches"])
    bubble_s, bubble_fraction = 0.0, None
    if S == 1:
        base, why = base_time(cal, s, hw)
        last_backward = base * cal.compute_share * (1 - FWD_SHARE) / M
    else:
        one = dict(
            s, micro_batches=1, batch_size=float(s["batch_size"] or cal.batch_ref) / M, world_size=s["world_size"]
        )
        per_mb, why = base_time(cal, one, hw)  # one micro-batch through the whole model on one rank
        h, k, _ = per_microbatch(cal, int(s["world_size"]), hw)
        per_mb += (h + k / M) * (hw.compute_scale or 1.0)
        t_stage = per_mb / S  # even split of the layers over the stages
        sim = simulate(str(s["pipeline_schedule"]), S, M, t_stage * FWD_SHARE, t_stage * (1 - FWD_SHARE))
        base = sim["makespan"]
        busy = max(sim["busy"])
        bubble_s = base - busy
        bubble_fraction = max(sim["bubble_fraction"])
        last_backward = t_stage * (1 - FWD_SHARE)
        why.append(
            f"pipeline: {S} equal stages, forward:backward 1:2, point-to-point transfers not modelled "
            f"(simulated {s['pipeline_schedule']} makespan)"
        )
    c = comm_cost(cal, s, hw, last_backward)
    kind = str(s["grad_compression"])
    comp = 0.0
    D = int(s["world_size"]) // (S * int(s.get("tensor_parallel") or 1))
    if kind != "none" and D > 1:
        if kind in cal.compression_s_per_byte:
            comp = cal.compression_s_per_byte[kind] * sum(cal.tensor_bytes or []) * (hw.compute_scale or 1.0)
        else:
            why.append(f"{kind}: no calibration run used it, so its compute cost is taken as 0 (bytes from its ratio)")
    step = base + c["exposed_s"] + comp
    busy = base - bubble_s
    computing = busy * cal.compute_share
    return {
        "step_time_s": step,
        "samples": float(s["batch_size"] or cal.batch_ref) * D,
        "comm": c,
        "breakdown": {
            "computing_s": computing,
            "communication_not_overlapped_s": c["exposed_s"],
            "overlapped_s": c["overlapped_s"],
            "free_s": busy - computing,
            "bubble_s": bubble_s,
            "compression_s": comp,
        },
        "bubble_fraction": bubble_fraction,
        "why": why,
    }


def predict(cal: Calibration, target: dict, hw: Hardware | None = None) -> dict:
    """Predicted step of one rank for `target` (the reference settings updated with it) on `hw` (default:
    the measured machine). Keys: see docs/predict.md (`--json`)."""
    hw = hw or cal.machine
    s = dict(cal.reference or {})
    s.update({k: v for k, v in target.items() if v is not None})
    for k in ("world_size", "micro_batches", "pipeline_stages", "tensor_parallel"):
        s[k] = int(s.get(k) or 1)
    s.setdefault("grad_compression", "none")
    s.setdefault("comm_fusion", 0)
    s.setdefault("pipeline_schedule", "1f1b")
    s.setdefault("batch_size", cal.batch_ref)
    s.setdefault("precision", cal.precision)
    if "overlap_grad_comm" not in target:  # not asked: what the hardware does by itself
        s["overlap_grad_comm"] = None if hw is not cal.machine else s.get("overlap_grad_comm")
    r = _step(cal, s, hw)
    step = r["step_time_s"]
    S = s["pipeline_stages"]
    one = _step(cal, dict(s, world_size=S * s["tensor_parallel"]), hw)  # one replica: the scaling baseline
    D = s["world_size"] // (S * s["tensor_parallel"])
    thr, thr1 = r["samples"] / step, one["samples"] / one["step_time_s"]
    sigma = math.sqrt(cal.noise**2 + cal.residual**2)
    assumptions = [
        f"per-rank compute scales with samples per replica (batch_size {s['batch_size']} vs {cal.batch_ref:g} "
        "measured); world size changes it only through that"
        + (" and the measured machine's shared-core slowdown" if hw.kind == "measured" else ""),
        "collective time = latency x ring hops + algorithm factor (all-reduce 2(n-1)/n, all-gather (n-1)/n, "
        "broadcast 1) "
        f"x bytes / bandwidth; link for {D} ranks: "
        + (
            f"{r['comm']['link']['transport']} {r['comm']['link']['bandwidth_gbps']:.3g} GB/s, "
            f"{r['comm']['link']['latency_us']:.3g} us/hop"
            if r["comm"]["link"]
            else "none"
        ),
        (
            "communication overlaps backward: a bucket starts when backward has produced it (gradients ready in "
            "backward order, "
            "forward:backward 1:2)"
        )
        if _overlaps(s, hw)
        else "communication does not overlap compute (measured hidden share "
        f"{hw.overlap_fraction if hw.overlap == 'none' else 0:.0%})",
        f"precision {s.get('precision') or cal.precision}: gradients are all-reduced in fp32 whatever the compute "
        "precision (MindSpore AMP O2 keeps fp32 weights and gradients; only grad_compression=fp16 halves the bytes)",
        "gradient buckets as the workload plans them (workloads/parallel/bucketing.plan_buckets) over the measured "
        "tensor sizes",
    ]
    if hw is not cal.machine and hw.compute_scale is None:
        assumptions.append(
            f"compute on {hw.name} is not known from its specifications: per-rank compute kept as measured "
            "(set --set compute_scale=X, e.g. from one real run there)"
        )
    elif hw is not cal.machine and hw.compute_scale != 1.0:
        assumptions.append(f"per-rank compute = measured x compute_scale {hw.compute_scale:g}")
    assumptions += list(dict.fromkeys(r["why"] + cal.notes))
    return {
        "step_time_s": step,
        "interval": {
            "low": step * max(0.0, 1 - 2 * sigma),
            "high": step * (1 + 2 * sigma),
            "sigma_rel": sigma,
            "what": "step x (1 -/+ 2 sigma), sigma^2 = calibration runs' step-time noise^2 + the model's RMS "
            "relative error on them^2",
        },
        "throughput": thr,
        "scaling_efficiency": thr / (D * thr1) if thr1 else None,
        "comm_share": r["comm"]["total_s"] / step if step > 0 else None,
        "bubble_fraction": r["bubble_fraction"],
        "breakdown": r["breakdown"],
        "collectives": {
            k: r["comm"][k]
            for k in ("count", "bytes", "latency_terms", "latency_s", "bytes_s", "total_s", "link", "by_class")
        },
        "settings": {
            k: s.get(k)
            for k in (
                "world_size",
                "batch_size",
                "micro_batches",
                "pipeline_stages",
                "tensor_parallel",
                "pipeline_schedule",
                "comm_fusion",
                "grad_compression",
                "compression_ratio",
                "precision",
                "overlap_grad_comm",
            )
        },
        "hardware": hw.name,
        "inputs": list(cal.inputs),
        "assumptions": assumptions,
    }


def _overlaps(s: dict, hw: Hardware) -> bool:
    ov = s.get("overlap_grad_comm")
    return ov is True or (ov is None and hw.overlap == "window")


def curve(cal: Calibration, world_sizes, hw: Hardware | None = None, **target) -> list[dict]:
    """Predictions over world sizes (the reference settings, updated with `target`): the scaling curve."""
    S = int(target.get("pipeline_stages") or cal.reference.get("pipeline_stages") or 1)
    return [predict(cal, dict(target, world_size=int(n)), hw) for n in world_sizes if int(n) % S == 0]
