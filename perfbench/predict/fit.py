"""Fitting the step-time model (perfbench/predict/model.py, whose doc derives each term) on calibration runs:
`fit(observations) -> Calibration`, `calibrate(store, names)` (the runs `--from` names, observed from the store).

Fitted: the collectives' latency per ring hop and bandwidth (weighted least squares over the runs' own
collectives), base_ref and the per-rank slowdown when ranks share cores (runs with M = 1), each other precision's
compute factor, compression compute per gradient byte, and the cost of extra micro-batches (runs with M > 1);
then the model's RMS relative error on its own runs and their step-time noise (the uncertainty).
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from analyzers.stats import median
from perfbench.errors import UserError
from perfbench.predict import comm
from perfbench.predict.hardware import Hardware, Link
from perfbench.predict.model import Calibration, base_time, comm_cost, predict
from perfbench.predict.observe import Observation, observe, resolve_runs


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
            (_base_obs(o) - base_time(cal, o.settings, machine)[0]) / grad
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
            modelled_comm = comm_cost(cal, o.settings, machine, 0.0)["exposed_s"] if n > 1 else 0.0
            per_mb.setdefault(n, []).append((M - 1, o.step_time_s - modelled_comm - comp - plain_base))
    for n, pts in sorted(per_mb.items()):
        cal.per_microbatch_s[n], cal.microbatch_fixed_s[n] = _microbatch_fit(pts)


def _measured_links(obs: list[Observation], notes: list[str]) -> tuple[list[Link], float]:
    """The measured machine's link (latency per ring hop, bandwidth) and the share of collective time it hid, from
    the runs with one gradient exchange per step as the workload plans it (with micro-batches the host loop's
    collectives also wait for the other rank's loop: that goes into the micro-batch cost); none without such runs."""
    multi = [
        o
        for o in obs
        if o.settings["world_size"] > 1
        and len(o.collectives)
        and o.settings["micro_batches"] == 1
        and o.settings["pipeline_stages"] == 1
    ]
    if not multi:
        return [], 0.0
    lat, bw, how = _comm_fit(multi)
    fr = [o.overlapped_s / (o.overlapped_s + o.comm_exposed_s) for o in multi if o.overlapped_s + o.comm_exposed_s > 0]
    notes.append(f"collectives on this machine: {lat * 1e6:.1f} us per ring hop, {bw / 1e9:.3g} GB/s ({how})")
    return [Link("measured", bw / 1e9, lat * 1e6, None)], median(fr) or 0.0


def fit(obs: list[Observation]) -> Calibration:
    """The model's calibration on observed runs of one workload (see the module doc for what is fitted)."""
    if not obs:
        raise UserError("no runs to calibrate on")
    notes: list[str] = []
    workloads = {o.workload for o in obs}
    if len(workloads) > 1:
        raise UserError(f"calibration runs mix workloads {sorted(workloads)}: give runs of one workload and model")
    tensors = _gradient_tensors(obs, notes)
    links, overlap_fraction = _measured_links(obs, notes)
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


def calibrate(store, names: list[str], measure: str = "wall") -> Calibration:
    """Fit on stored runs: `names` are sweep ids, run ids, short ids or prefixes (`--from`); `measure`:
    wall-clock step time (the catalogue's step_time_s) or `cpu` (step_cpu_s)."""

    return fit([observe(store, r, measure=measure) for r in resolve_runs(store, names)])
