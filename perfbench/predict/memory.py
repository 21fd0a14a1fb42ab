"""The memory model: peak memory of one rank for settings never run (docs/predict.md, "Memory").

    peak = baseline + model states + activations + buffers

* model states (ZeRO paper, Rajbhandari et al. 2020, section 5, for fp32 training): parameters 4 B, gradients 4 B,
  optimizer state 4 B x k per parameter (k = 1 for momentum, 2 for Adam/AdamW), the sharded parts divided by the
  data-parallel size D:
      stage 0: 4P + 4P + 4kP        stage 1: 4P + 4P + 4kP/D        stage 2: 4P + 4P/D + 4kP/D
  (`model_states`; where gradient sharding is emulated, as on the CPU backend, gradients count whole).
* activations: bytes per sample kept for backward, times the samples in flight (the micro-batch, batch_size / M);
  fitted per `recompute` setting from stored runs as (measured peak - baseline - model states - buffers) / samples.
* buffers: communication buffers the data-parallel step adds: a flattened bucket and its all-reduced copy
  (2 x the largest bucket's bytes, D > 1). ZeRO's broadcast of the updated parameters writes into the parameters
  in place, one tensor at a time (workloads/parallel/zero.py): the root's copy of one tensor is not modelled.
* baseline: the process before the model (CPU: the MindSpore process's resident set, from the hardware profile or
  fitted; Ascend: the device's runtime reservation from the profile).

Pure Python: the formulas here, the store read in `observe_memory`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from perfbench.errors import UserError
from workloads.parallel.layout_math import FP32, model_states


def buffer_bytes(params: int, dp: int, largest_bucket_bytes: float | None) -> float:
    """Communication buffers of one data-parallel step (0 on one rank): the largest bucket and its all-reduced copy."""
    if dp <= 1:
        return 0.0
    bucket = FP32 * params if largest_bucket_bytes is None else float(largest_bucket_bytes)
    return 2.0 * bucket


@dataclass
class MemoryObservation:
    run_id: str
    params: int
    dp: int
    zero_stage: int
    states_per_param: int
    recompute: bool
    samples_in_flight: float
    largest_bucket_bytes: float | None
    peak_bytes: float  # largest rank's measured peak


@dataclass
class MemoryCalibration:
    inputs: list[str]
    baseline_bytes: float
    baseline_source: str
    activation_bytes_per_sample: dict  # recompute (bool) -> bytes per sample in flight
    residual: float = 0.0  # RMS relative error on the calibration runs
    grads_sharded: bool = False  # the measured machine: emulated (CPU) gradient sharding keeps gradients whole
    reference: dict = field(default_factory=dict)


def _fixed(o: MemoryObservation, grads_sharded: bool) -> float:
    st = model_states(o.params, o.dp, o.zero_stage, o.states_per_param, grads_sharded)["total_bytes"]
    return st + buffer_bytes(o.params, o.dp, o.largest_bucket_bytes)


def fit_memory(
    obs: list[MemoryObservation], baseline_bytes: float | None = None, grads_sharded: bool = False
) -> MemoryCalibration:
    """Activations per sample (per recompute setting) and, where batch sizes differ, the baseline, by least
    squares of  peak - model states - buffers = baseline + a[recompute] x samples."""
    if not obs:
        raise UserError("no calibration run has a measured peak memory (peak_memory_bytes)")
    rest = [(o.recompute, o.samples_in_flight, o.peak_bytes - _fixed(o, grads_sharded)) for o in obs]
    groups = sorted({r for r, _, _ in rest})
    distinct = {s for _, s, _ in rest}
    if baseline_bytes is None and len(distinct) >= 2:
        import numpy as np

        X = [[1.0] + [s if r == g else 0.0 for g in groups] for r, s, _ in rest]
        coef, *_ = np.linalg.lstsq(np.array(X), np.array([y for _, _, y in rest]), rcond=None)
        base, src = float(coef[0]), f"fitted from {len(obs)} runs with {len(distinct)} batch sizes"
        act = {g: float(c) for g, c in zip(groups, coef[1:])}
    else:
        if baseline_bytes is None:
            raise UserError(
                "the calibration runs all have the same samples in flight, so the baseline cannot be "
                "told from the activations: give a hardware profile with process_baseline_bytes or add "
                "a run with another batch_size"
            )
        base, src = float(baseline_bytes), "the hardware profile's process_baseline_bytes"
        # least squares through the origin per recompute setting: a = sum(s (y - base)) / sum(s^2)
        act = {
            g: sum(s * (y - base) for r, s, y in rest if r == g) / sum(s * s for r, s, _ in rest if r == g)
            for g in groups
        }
    cal = MemoryCalibration(
        inputs=[o.run_id for o in obs],
        baseline_bytes=base,
        baseline_source=src,
        activation_bytes_per_sample=act,
        grads_sharded=grads_sharded,
    )
    errs = [(predict_memory(cal, _settings(o))["peak_bytes"] - o.peak_bytes) / o.peak_bytes for o in obs]
    cal.residual = math.sqrt(sum(e * e for e in errs) / len(errs))
    ref = max(obs, key=lambda o: o.dp)
    cal.reference = _settings(ref)
    return cal


def _settings(o: MemoryObservation) -> dict:
    return {
        "params": o.params,
        "dp": o.dp,
        "zero_stage": o.zero_stage,
        "states_per_param": o.states_per_param,
        "recompute": o.recompute,
        "samples_in_flight": o.samples_in_flight,
        "largest_bucket_bytes": o.largest_bucket_bytes,
    }


def predict_memory(cal: MemoryCalibration, s: dict, hw=None) -> dict:
    """Peak bytes of one rank for settings `s` (keys of `_settings`) on `hw` (None: the measured machine)."""
    recompute = bool(s["recompute"])
    if recompute not in cal.activation_bytes_per_sample:
        raise UserError(
            f"recompute={str(recompute).lower()}: no calibration run used it, so its activations per "
            "sample are unknown (add such a run to --from)"
        )
    on_device = hw is not None and getattr(hw, "device_memory_bytes", None) is not None
    grads_sharded = True if on_device else cal.grads_sharded
    states = model_states(
        int(s["params"]), int(s["dp"]), int(s["zero_stage"]), int(s["states_per_param"]), grads_sharded
    )
    act = cal.activation_bytes_per_sample[recompute] * float(s["samples_in_flight"])
    buf = buffer_bytes(int(s["params"]), int(s["dp"]), s.get("largest_bucket_bytes"))
    if on_device:
        base = float(getattr(hw, "device_baseline_bytes", None) or 0.0)
        base_src = f"{hw.name}'s device_baseline_bytes" if base else f"{hw.name}: no device baseline given (0)"
    else:
        base, base_src = cal.baseline_bytes, cal.baseline_source
    peak = base + states["total_bytes"] + act + buf
    sigma = max(cal.residual, 0.02)
    capacity = getattr(hw, "device_memory_bytes", None) if hw is not None else None
    return {
        "peak_bytes": peak,
        "interval": {
            "low": peak * (1 - 2 * sigma),
            "high": peak * (1 + 2 * sigma),
            "sigma_rel": sigma,
            "what": "peak x (1 -/+ 2 sigma), sigma = the model's RMS relative error on its calibration runs "
            "(at least 2%)",
        },
        "parts": {
            "baseline_bytes": base,
            **{k: v for k, v in states.items() if k != "total_bytes"},
            "activations_bytes": act,
            "buffers_bytes": buf,
        },
        "capacity_bytes": capacity,
        "fits": None if capacity is None else peak <= capacity,
        "assumptions": [
            f"model states per ZeRO stage {s['zero_stage']} (fp32: params 4 B, grads 4 B, optimizer 4 B x "
            f"{s['states_per_param']} per parameter, sharded parts / {s['dp']})"
            + ("" if grads_sharded else "; gradients counted whole: the CPU emulation of stage 2 all-reduces them"),
            f"activations {cal.activation_bytes_per_sample[recompute] / 2**20:.2f} MiB per sample in flight "
            f"(recompute={str(recompute).lower()}, fitted on the measured machine as the rest of its peak, so it also "
            "holds what the model does not name, e.g. MindSpore's compile-time and pool memory on CPU; carried as it "
            "is to other hardware, where it is an upper bound)",
            "buffers: 2 x the largest gradient bucket when data-parallel"
            + ("; ZeRO's parameter broadcast is in place (no receive buffer)" if s["zero_stage"] else ""),
            f"baseline: {base_src}",
        ],
    }


# ---- from the store ------------------------------------------------------------------------------------


def largest_bucket_bytes(comm_fusion, params: int) -> float | None:
    """The biggest gradient bucket `comm_fusion` makes (workloads/parallel/bucketing.py): `all` = every gradient,
    x MB = at most x MB (or all of them when smaller); 0 (one all-reduce per tensor) = unknown without the tensor
    sizes (None: `buffer_bytes` then takes every gradient, 4P, an upper bound)."""
    total = FP32 * params
    if str(comm_fusion).strip().lower() == "all":
        return float(total)
    mb = float(comm_fusion)
    return None if mb == 0 else float(min(mb * 2**20, total))


def memory_settings(cfg: dict, params: int) -> dict:
    """The memory model's settings of a run config (resolved knobs, run_config.json)."""
    from analyzers.analyses.memory import OPTIMIZER_STATES

    par, train = cfg.get("parallel") or {}, cfg.get("train") or {}
    S = int(par.get("pipeline_stages") or 1)
    opt = str(train.get("optimizer") or "momentum")
    return {
        "params": int(params),
        "dp": max(1, int(cfg.get("world_size") or 1) // S),
        "zero_stage": int(par.get("zero_stage") or 0),
        "states_per_param": OPTIMIZER_STATES[opt],
        "optimizer": opt,
        "recompute": bool(train.get("recompute")),
        "samples_in_flight": float(train.get("batch_size") or 1) / int(par.get("micro_batches") or 1),
        "largest_bucket_bytes": largest_bucket_bytes(par.get("comm_fusion", 0), params),
        "batch_size": train.get("batch_size"),
        "micro_batches": int(par.get("micro_batches") or 1),
        "world_size": int(cfg.get("world_size") or 1),
        "comm_fusion": par.get("comm_fusion", 0),
    }


def observe_memory(store, record: dict) -> tuple[MemoryObservation, float | None]:
    """A stored ok run as a MemoryObservation, and the process's resident set before the model was built (the
    largest rank's `baseline_rss_bytes` in its meta, or None)."""
    from perfbench.run.ingest import read_meta

    rid = record["run_id"]
    peak = (record.get("metrics") or {}).get("peak_memory_bytes")
    meta = read_meta(store.artifacts_dir(rid) / "metrics")
    params = next((m.get("model_params") or m.get("params") for m in meta.values() if m.get("params")), None)
    if record.get("status") != "ok" or not peak or not params:
        raise UserError(
            f"run {rid} cannot calibrate the memory model: status {record.get('status')!r}, "
            f"peak_memory_bytes {peak!r}, parameter count {params!r} (it needs a finished sweep run "
            "whose ranks sampled their memory)"
        )
    s = memory_settings(record.get("config") or {}, params)
    obs = MemoryObservation(
        run_id=rid,
        **{
            k: s[k]
            for k in (
                "params",
                "dp",
                "zero_stage",
                "states_per_param",
                "recompute",
                "samples_in_flight",
                "largest_bucket_bytes",
            )
        },
        peak_bytes=float(peak),
    )
    # baseline_rss_bytes (workloads/runner.py); rss_before_build_bytes: the same sample under its first name, in
    # runs stored before the rename
    base = [m.get("baseline_rss_bytes") or m.get("rss_before_build_bytes") for m in meta.values()]
    base = [b for b in base if b]
    return obs, (float(max(base)) if base else None)


def calibrate_memory(store, names: list[str]) -> tuple[MemoryCalibration, dict]:
    """Fit on stored runs (`--from`); returns the calibration and the reference run's full settings."""
    from perfbench.predict.observe import resolve_runs

    records = resolve_runs(store, names)
    pairs = [observe_memory(store, r) for r in records]
    bases = [b for _, b in pairs if b]
    cal = fit_memory([o for o, _ in pairs], statistics.median(bases) if bases else None)
    if bases:
        cal.baseline_source = f"resident set before the model was built, median over {len(bases)} runs"
    ref = max(records, key=lambda r: int((r.get("config") or {}).get("world_size") or 1))
    return cal, memory_settings(ref.get("config") or {}, cal.reference["params"])


#: `--set` keys the memory model understands (with --memory)
MEMORY_KEYS = (
    "world_size",
    "pipeline_stages",
    "batch_size",
    "micro_batches",
    "comm_fusion",
    "zero_stage",
    "recompute",
    "optimizer",
)


def memory_target(ref: dict, target: dict) -> dict:
    """The reference run's settings updated with `target` (--set values), resolved into the model's settings."""
    from analyzers.analyses.memory import OPTIMIZER_STATES

    unknown = sorted(set(target) - set(MEMORY_KEYS))
    if unknown:
        raise UserError(f"--set {unknown[0]}: the memory model does not know it (known: {', '.join(MEMORY_KEYS)})")
    t = {**ref, **{k: v for k, v in target.items() if v is not None}}
    if isinstance(t["recompute"], str):
        if t["recompute"].lower() not in ("true", "false"):
            raise UserError(f"--set recompute={t['recompute']!r}: expected true or false")
        t["recompute"] = t["recompute"].lower() == "true"
    if t["optimizer"] not in OPTIMIZER_STATES:
        raise UserError(f"--set optimizer={t['optimizer']!r}: the memory model knows {', '.join(OPTIMIZER_STATES)}")
    if int(t["zero_stage"]) not in (0, 1, 2):
        raise UserError(f"--set zero_stage={t['zero_stage']!r}: expected 0, 1 or 2")
    S = int(target.get("pipeline_stages") or 1)
    ws = int(t["world_size"])
    if ws % S:
        raise UserError(f"pipeline_stages={S} must divide world_size={ws}")
    M = int(t.get("micro_batches") or 1)
    t.update(
        dp=ws // S,
        states_per_param=OPTIMIZER_STATES[t["optimizer"]],
        micro_batches=M,
        samples_in_flight=float(t["batch_size"]) / M,
        largest_bucket_bytes=largest_bucket_bytes(t["comm_fusion"], int(t["params"])),
    )
    return t
