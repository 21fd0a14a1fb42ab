"""The step-time model: `fit(observations) -> Calibration`, `predict(calibration, target, hardware) -> dict`.

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
import statistics
from dataclasses import dataclass, field

import numpy as np

from analyzers.stats import median
from perfbench.errors import UserError
from perfbench.predict import comm
from perfbench.predict.hardware import Hardware, Link
from perfbench.predict.observe import Observation, observe, resolve_runs
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


# ---- fitting ---------------------------------------------------------------------------------


def _comm_fit(obs: list[Observation]) -> tuple[float, float, str]:
    """(latency per hop s, bandwidth B/s) by weighted least squares over every collective of the runs:
    time = latency x hops + factor x bytes / bandwidth, each run weighing the same in all (a run with 161
    small all-reduces does not outvote a run with one big one)."""
    X, y, w = [], [], []
    used = 0
    for o in obs:
        co = o.collectives.dropna(subset=["size_bytes"])
        if not len(co):
            continue
        used += 1
        n = co["group_size"].fillna(o.settings["world_size"]).astype(int)
        for t, k, b, ts in zip(co["op_type"], n, co["size_bytes"], co["time_s"]):
            X.append([comm.steps(t, k), comm.factor(t, k) * float(b)])
            y.append(float(ts))
            w.append(1.0 / len(co))
    if not X:
        raise UserError(
            "no calibration run has collectives with sizes: the model needs at least one run on "
            "more than one rank (e.g. world_size 2) to fit latency and bandwidth"
        )
    X, y, sw = np.array(X, dtype=float), np.array(y, dtype=float), np.sqrt(np.array(w))
    coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    lat, inv_bw = float(coef[0]), float(coef[1])
    Xw, yw = X * sw[:, None], y * sw
    if lat < 0:  # noise: the bytes term alone
        lat, inv_bw = 0.0, float(np.dot(Xw[:, 1], yw) / np.dot(Xw[:, 1], Xw[:, 1]))
    if inv_bw <= 0:  # latency-bound: the latency alone, bandwidth effectively unlimited
        inv_bw = 1e-15
        lat = float(np.dot(Xw[:, 0], yw) / np.dot(Xw[:, 0], Xw[:, 0]))
    return lat, 1.0 / inv_bw, f"weighted least squares over the {len(y)} collectives of {used} runs"


def _base_obs(o: Observation) -> float:
    """A run's per-rank step time outside its exposed collectives."""
    return o.step_time_s - o.comm_exposed_s


def _gradient_tensors(obs: list[Observation], notes: list[str]) -> list[float] | None:
    """The gradient tensors' sizes: recorded by a run, else the buckets of an uncompressed, unpipelined run."""
    tensors = next((o.tensor_bytes for o in obs if o.tensor_bytes), None)
    if tensors is None:
        src = next(
            (
                o
                for o in obs
                if len(o.collectives)
                and o.settings["grad_compression"] == "none"
                and o.settings["pipeline_stages"] == 1
            ),
            None,
        )
        if src is not None:
            tensors = [float(b) for b in src.collectives["size_bytes"].fillna(0)]
            notes.append(
                f"gradient tensor sizes unknown (no run all-reduces each tensor: comm_fusion 0): the buckets of "
                f"{src.run_id} stand in for tensors, so smaller buckets than those cannot be predicted well"
            )
    return tensors


def _precision_scales(machine, precs: set, ref_prec: str, every_plain: list, uncompressed: list, notes: list) -> None:
    """Each other precision's per-rank compute against the reference precision's, same world size and batch."""
    for p in sorted(precs):
        ratios = []
        for o in every_plain:
            if o.settings.get("precision") != p or o.settings["grad_compression"] != "none":
                continue
            same = [
                _base_obs(r)
                for r in uncompressed
                if r.settings["world_size"] == o.settings["world_size"]
                and r.settings["batch_size"] == o.settings["batch_size"]
            ]
            if same and statistics.median(same) > 0:
                ratios.append(_base_obs(o) / statistics.median(same))
        if ratios:
            machine.precision_scale[p] = statistics.median(ratios) * machine.precision_scale.get(ref_prec, 1.0)
            notes.append(
                f"{p}: per-rank compute {machine.precision_scale[p]:.2f} x {ref_prec}'s, from {len(ratios)} "
                f"run(s) against {ref_prec} runs of the same world size and batch"
            )


def _compression_costs(cal: Calibration, machine, plain: list, grad: float | None, notes: list) -> None:
    """Compression compute per byte of gradient, per kind (runs that exchange gradients)."""
    exchanging = [o for o in plain if o.settings["world_size"] > 1]  # one rank compresses nothing
    for kind in sorted({o.settings["grad_compression"] for o in exchanging} - {"none"}):
        if not grad:
            break
        per = [
            (_base_obs(o) - _base(cal, o.settings, machine)[0]) / grad
            for o in exchanging
            if o.settings["grad_compression"] == kind
        ]
        v = median(per)
        if v is not None:
            if v < 0:
                notes.append(
                    f"{kind}: the fitted compression compute came out negative ({v * grad * 1e3:.1f} ms per step, "
                    "noise): taken as 0"
                )
            cal.compression_s_per_byte[kind] = max(0.0, v)


def _microbatch_costs(cal: Calibration, machine, obs: list, grad: float | None, ref: tuple[float, float]) -> None:
    """The cost of each extra micro-batch per world size (runs with micro-batches and no pipeline)."""
    base_ref, b_ref = ref
    per_mb: dict[int, list[float]] = {}
    for o in obs:
        M, n = o.settings["micro_batches"], o.settings["world_size"]
        if M > 1 and o.settings["pipeline_stages"] == 1:
            comp = cal.compression_s_per_byte.get(o.settings["grad_compression"], 0.0) * (grad or 0.0)
            plain_base = machine.contention_at(n)[0] * base_ref * float(o.settings["batch_size"]) / b_ref
            modelled_comm = _comm(cal, o.settings, machine, 0.0)["exposed_s"] if n > 1 else 0.0
            per_mb.setdefault(n, []).append((M - 1, o.step_time_s - modelled_comm - comp - plain_base))
    for n, pts in sorted(per_mb.items()):
        cal.per_microbatch_s[n], cal.microbatch_fixed_s[n] = _microbatch_fit(pts)


def fit(obs: list[Observation]) -> Calibration:
    if not obs:
        raise UserError("no runs to calibrate on")
    notes: list[str] = []
    workloads = {o.workload for o in obs}
    if len(workloads) > 1:
        raise UserError(f"calibration runs mix workloads {sorted(workloads)}: give runs of one workload and model")
    tensors = _gradient_tensors(obs, notes)
    # the comm fit: runs with one gradient exchange per step as the workload plans it (with micro-batches the host
    # loop's collectives also wait for the other rank's loop: that goes into the micro-batch cost)
    multi = [
        o
        for o in obs
        if o.settings["world_size"] > 1
        and len(o.collectives)
        and o.settings["micro_batches"] == 1
        and o.settings["pipeline_stages"] == 1
    ]
    links, overlap_fraction = [], 0.0
    if multi:
        lat, bw, how = _comm_fit(multi)
        links = [Link("measured", bw / 1e9, lat * 1e6, None)]
        fr = [
            o.overlapped_s / (o.overlapped_s + o.comm_exposed_s) for o in multi if o.overlapped_s + o.comm_exposed_s > 0
        ]
        overlap_fraction = median(fr) or 0.0
        notes.append(f"collectives on this machine: {lat * 1e6:.1f} us per ring hop, {bw / 1e9:.3g} GB/s ({how})")
    # per-rank time outside collectives
    every_plain = [o for o in obs if o.settings["micro_batches"] == 1 and o.settings["pipeline_stages"] == 1]
    if not every_plain:
        raise UserError("the calibration needs at least one run with micro_batches 1 and pipeline_stages 1")
    # base_ref: runs in one precision (fp32 when there are such) whose profile sees their communication
    # (an overlapped run's asynchronous all-reduces are not in the CPU profile: its exposed share is unknown)
    precs = {o.settings.get("precision", "fp32") for o in every_plain}
    ref_prec = "fp32" if "fp32" in precs else sorted(precs)[0]
    plain = [
        o
        for o in every_plain
        if o.settings.get("precision", "fp32") == ref_prec and not o.settings.get("overlap_grad_comm")
    ] or every_plain
    uncompressed = [o for o in plain if o.settings["grad_compression"] == "none"] or plain
    b_ref = float(median([o.settings["batch_size"] for o in uncompressed]) or 1)

    by_n: dict[int, list[float]] = {}
    for o in uncompressed:
        by_n.setdefault(o.settings["world_size"], []).append(
            _base_obs(o) * b_ref / float(o.settings["batch_size"] or b_ref)
        )
    n0 = min(by_n)
    base_ref = statistics.median(by_n[n0])
    contention = {n: statistics.median(v) / base_ref for n, v in sorted(by_n.items())}
    if n0 != 1:
        notes.append(f"no 1-rank run: per-rank compute is relative to {n0} ranks")
    machine = Hardware(
        name="measured",
        kind="measured",
        links=links or [Link("measured", 1.0, 0.0, None)],
        overlap="none",
        overlap_fraction=overlap_fraction,
        compute_scale=1.0,
        contention=contention,
        cores=next((o.cpus for o in obs if o.cpus), None),
        notes=["fitted by perfbench predict from " + ", ".join(o.run_id for o in obs)],
    )
    cal = Calibration(
        inputs=[o.run_id for o in obs],
        batch_ref=b_ref,
        base_ref_s=base_ref,
        tensor_bytes=tensors,
        machine=machine,
        notes=notes,
        workload=obs[0].workload,
        model=dict(obs[0].model or {}),
        precision=ref_prec,
    )
    # compute per precision: a precision's per-rank time outside collectives against the reference's, same
    # world size and batch (median over the runs of each)
    machine.precisions = ["fp32", "fp16"]  # what perfbench's CPU backend has kernels for (no bf16 MatMul/Conv2D)
    _precision_scales(machine, precs - {ref_prec}, ref_prec, every_plain, uncompressed, notes)
    shares = [o.computing_s / (o.computing_s + o.free_s) for o in plain if o.computing_s + o.free_s > 0]
    cal.compute_share = median(shares) or 1.0
    grad = sum(tensors) if tensors else None
    _compression_costs(cal, machine, plain, grad, notes)
    _microbatch_costs(cal, machine, obs, grad, (base_ref, b_ref))
    # reference settings: the run on the most ranks, uncompressed and without micro-batches if there is one
    ref = max(
        obs,
        key=lambda o: (
            o.settings["world_size"],
            o.settings["grad_compression"] == "none",
            o.settings["micro_batches"] == 1,
            -obs.index(o),
        ),
    )
    cal.reference = dict(ref.settings)
    # how well the model reproduces its own runs, and how noisy they were
    errs = [predict(cal, o.settings)["step_time_s"] / o.step_time_s - 1 for o in obs]
    cal.residual = float(np.sqrt(np.mean(np.square(errs))))
    cal.noise = median([o.noise / math.sqrt(max(1, len(o.step_samples))) * 1.2533 for o in obs]) or 0.0
    return cal


# ---- prediction --------------------------------------------------------------------------------


def _base(cal: Calibration, s: dict, hw: Hardware) -> tuple[float, list[str]]:
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


def _microbatch_fit(pts: list[tuple[int, float]]) -> tuple[float, float]:
    """(per extra micro-batch h, fixed cost k of the micro-batch path) from (M - 1, extra time) points:
    least squares of extra = k + (M - 1) x h when the runs used two or more M > 1, else k = 0."""
    x = np.array([p[0] for p in pts], dtype=float)
    y = np.array([p[1] for p in pts], dtype=float)
    if len(set(x)) >= 2:
        (h, k), *_ = np.linalg.lstsq(np.column_stack([x, np.ones_like(x)]), y, rcond=None)
        if k >= 0 and h >= 0:
            return float(h), float(k)
    return float(np.median(y / x)), 0.0


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


def _comm(cal: Calibration, s: dict, hw: Hardware, backward_s: float) -> dict:
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
        base, why = _base(cal, s, hw)
        last_backward = base * cal.compute_share * (1 - FWD_SHARE) / M
    else:
        one = dict(
            s, micro_batches=1, batch_size=float(s["batch_size"] or cal.batch_ref) / M, world_size=s["world_size"]
        )
        per_mb, why = _base(cal, one, hw)  # one micro-batch through the whole model on one rank
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
    c = _comm(cal, s, hw, last_backward)
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


def calibrate(store, names: list[str], measure: str = "wall") -> Calibration:
    """Fit on stored runs: `names` are sweep ids, run ids, short ids or prefixes (`--from`); `measure`:
    wall-clock step time (the catalogue's step_time_s) or `cpu` (step_cpu_s)."""

    return fit([observe(store, r, measure=measure) for r in resolve_runs(store, names)])


def curve(cal: Calibration, world_sizes, hw: Hardware | None = None, **target) -> list[dict]:
    """Predictions over world sizes (the reference settings, updated with `target`): the scaling curve."""
    S = int(target.get("pipeline_stages") or cal.reference.get("pipeline_stages") or 1)
    return [predict(cal, dict(target, world_size=int(n)), hw) for n in world_sizes if int(n) % S == 0]
