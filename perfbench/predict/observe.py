"""Stored runs -> `Observation`s: what the model is calibrated on, read from the store only.

Per run: its resolved settings (from the stored run config), the measured step time (median of the
unprofiled measured steps, the catalogue's `step_time_s`), the step breakdown of the profiled steps
scaled to the unprofiled step time (the profiler slows the steps it records, by a factor the run itself
measures: `profiled_step_time_s / step_time_s`), and its collectives per step from the stored `comm_ops`
table (op type, group size, payload bytes, time), and, from a run that all-reduces every gradient
tensor on its own (`comm_fusion: 0`), the gradient tensors' sizes in the order backward produces them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyzers.schema import warmup_steps
from perfbench.errors import UserError

#: the settings the model knows, with the workload's defaults (docs/config.md)
KNOBS = {
    "world_size": 1,
    "batch_size": None,
    "micro_batches": 1,
    "pipeline_stages": 1,
    "pipeline_schedule": "1f1b",
    "comm_fusion": 0,
    "grad_compression": "none",
    "compression_ratio": 0.01,
    "fusion_impl": "perfbench",
    "tensor_parallel": 1,
    "overlap_grad_comm": False,
    "precision": "fp32",
}
#: the knobs above that live in the run config's `train` section (the others are in `parallel`)
TRAIN_KNOBS = ("precision",)


@dataclass
class Observation:
    run_id: str
    settings: dict
    step_time_s: float
    step_samples: list[float]
    samples_per_step: float | None
    #: profiled-window parts scaled to the unprofiled step (s): computing, exposed communication, overlapped, free
    computing_s: float
    comm_exposed_s: float
    overlapped_s: float
    free_s: float
    #: collectives of one step on one rank, times scaled like the breakdown: op_type, group_size, size_bytes, time_s
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: fp32 bytes of every gradient tensor in backward order (from a per-tensor all-reduce run), else None
    tensor_bytes: list[float] | None = None
    #: bytes of the gradients in fp32 (what an uncompressed all-reduce of everything moves)
    grad_bytes: float | None = None
    workload: str = ""
    cpus: int | None = None  # cores of the machine the run measured
    model: dict = field(default_factory=dict)  # the run's model config (layout_collectives needs moe's sizes)

    @property
    def comm_total_s(self) -> float:
        return float(self.collectives["time_s"].sum()) if len(self.collectives) else 0.0

    @property
    def noise(self) -> float:
        """Relative spread of the step time: MAD x 1.4826 / median over the measured steps."""
        s = self.step_samples
        if len(s) < 3:
            return 0.0
        med = statistics.median(s)
        mad = statistics.median(abs(x - med) for x in s)
        return 1.4826 * mad / med if med > 0 else 0.0


def settings_of(record: dict) -> dict:
    """The model's knobs for a run, resolved from its stored config (defaults where the config is silent)."""
    cfg = record.get("config") or {}
    par = cfg.get("parallel") or {}
    train = cfg.get("train") or {}
    s = {k: (train if k in TRAIN_KNOBS else par).get(k, v) for k, v in KNOBS.items()}
    s["world_size"] = int(cfg.get("world_size") or (record.get("settings") or {}).get("world_size") or 1)
    s["batch_size"] = train.get("batch_size")
    for k in ("micro_batches", "pipeline_stages", "tensor_parallel"):
        s[k] = int(s[k] or 1)
    return s


def _one_step_collectives(co: pd.DataFrame | None, scale: float) -> pd.DataFrame:
    """The collectives of one step on one rank: the ops of the (rank, step) whose collective time is the
    median one, their times scaled so that they add up to the mean collective time per rank-step (a single
    slow occurrence is part of what a step costs). Op names may repeat within a step; each row is one op."""
    cols = ["op_name", "op_type", "group_size", "size_bytes", "time_s", "start_us"]
    if co is None or co.empty:
        return pd.DataFrame(columns=cols)
    co = co.dropna(subset=["elapse_ms"]).copy()
    co["step"] = co["step"].fillna(-1)
    totals = co.groupby(["rank", "step"])["elapse_ms"].sum().sort_values()
    rank, step = totals.index[(len(totals) - 1) // 2]
    one = co[(co["rank"] == rank) & (co["step"] == step)].sort_values("start_us")
    k = float(totals.mean()) / float(totals.loc[(rank, step)]) if totals.loc[(rank, step)] > 0 else 1.0
    return pd.DataFrame(
        {
            "op_name": one["op_name"].to_numpy(),
            "op_type": one["op_type"].astype(str).str.lower().to_numpy(),
            "group_size": pd.to_numeric(one["group_size"], errors="coerce").to_numpy(),
            "size_bytes": pd.to_numeric(one["size_bytes"], errors="coerce").to_numpy(),
            "time_s": one["elapse_ms"].to_numpy(float) / 1e3 * k * scale,
            "start_us": (one["start_us"] - one["start_us"].min()).to_numpy(float),
        }
    )[cols]


def observe(store, record: dict, quantile: float | None = None, measure: str = "wall") -> Observation:
    """One stored ok run as an Observation (UserError naming the run when it lacks what the model needs).
    `quantile`: take that quantile of the measured steps as the step time instead of the catalogue's
    median; `measure="cpu"`: model the catalogue's `step_cpu_s` (the rank process's CPU time per step,
    which a busy machine stretches far less) instead of wall time. bench/bench_predict.py reports both."""
    rid = record["run_id"]
    m = record.get("metrics") or {}
    if measure == "cpu":
        ws = store.read_table(rid, "workload_steps")
        warm = warmup_steps(record.get("config"))
        if ws is None or "cpu_s" not in ws or not m.get("step_cpu_s"):
            raise UserError(f"run {rid} has no per-step CPU time (cpu_s) to model")
        steady = ws[(ws["step"] >= warm) & ~ws["profiled"].astype(bool) & ws["cpu_s"].notna()]
        cpu = [float(x) for x in steady.groupby("step")["cpu_s"].max()]
        return _observe(
            store, record, dict(m, step_time_s=float(np.median(cpu)) if cpu else m["step_cpu_s"]), cpu, quantile
        )
    return _observe(store, record, m, None, quantile)


def _observe(store, record: dict, m: dict, samples: list[float] | None, quantile: float | None) -> Observation:
    rid = record["run_id"]
    step = m.get("step_time_s")
    if record.get("status") != "ok" or not step:
        raise UserError(
            f"run {rid} cannot calibrate the model: status {record.get('status')!r}, step_time_s {step!r} "
            "(it needs a finished run with measured steps)"
        )
    if samples is None:
        series = store.read_table(rid, "step_metrics")
        samples = []
        if series is not None and "step_time_s" in series and "measured" in series:
            samples = [float(x) for x in series.loc[series["measured"].astype(bool), "step_time_s"].dropna()]
    if quantile is not None and samples:
        q = float(np.quantile(samples, quantile))
        m = dict(m, profiled_step_time_s=(m.get("profiled_step_time_s") or step) * q / step)
        step = q
    prof = m.get("profiled_step_time_s")
    # (with measure="cpu" the profiled window's wall-clock parts are scaled to the CPU step the same way)
    parts = {
        k: float(m.get(k) or 0.0) for k in ("computing_s", "communication_not_overlapped_s", "overlapped_s", "free_s")
    }
    window = parts["computing_s"] + parts["communication_not_overlapped_s"] + parts["free_s"]
    # the profiled steps are slower than the measured ones: scale their parts to the measured step
    scale = step / prof if prof else (step / window if window > 0 else 1.0)
    co = _one_step_collectives(store.read_table(rid, "comm_ops"), scale)
    s = settings_of(record)
    tensor_bytes = None
    if (
        len(co)
        and str(s["comm_fusion"]) in ("0", "0.0")
        and s["grad_compression"] == "none"
        and s["pipeline_stages"] == 1
        and s["fusion_impl"] == "perfbench"
        and s["tensor_parallel"] == 1
    ):
        tensor_bytes = [float(b) for b in co["size_bytes"]]
    grad = float(sum(tensor_bytes)) if tensor_bytes else None
    return Observation(
        run_id=rid,
        settings=s,
        step_time_s=float(step),
        step_samples=samples,
        samples_per_step=m.get("samples_per_step"),
        computing_s=parts["computing_s"] * scale,
        comm_exposed_s=parts["communication_not_overlapped_s"] * scale,
        overlapped_s=parts["overlapped_s"] * scale,
        free_s=parts["free_s"] * scale,
        collectives=co,
        tensor_bytes=tensor_bytes,
        grad_bytes=grad,
        workload=str((record.get("config") or {}).get("workload") or ""),
        cpus=(record.get("env") or {}).get("cpus"),
        model=dict((record.get("config") or {}).get("model") or {}),
    )


def resolve_runs(store, names: list[str]) -> list[dict]:
    """Run records for `--from` values: each a sweep id (all its ok runs), a run id, short id or prefix."""
    out: dict[str, dict] = {}
    sweeps = {s.get("sweep_id") for s in store.list_sweeps()}
    for name in names:
        for part in [p for p in str(name).split(",") if p.strip()]:
            part = part.strip()
            if part in sweeps:
                runs = [r for r in store.list_runs(sweep=part) if r.get("status") == "ok"]
                if not runs:
                    raise UserError(f"sweep {part!r} has no finished (ok) run to calibrate on")
                out.update({r["run_id"]: r for r in runs})
            else:
                rec = store.get_run(part)
                out[rec["run_id"]] = rec
    if not out:
        raise UserError("--from names no run: give a sweep id, a run id or a prefix (see `perfbench ls`)")
    return list(out.values())


def relative_spread(values) -> float:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    return float(np.sqrt(np.mean(v**2))) if len(v) else 0.0
