"""`search.constraints: {peak_memory_gb: X}` before a trial runs: the memory model (perfbench/predict/memory.py)
calibrated on the study's finished trials predicts the point's peak per rank; a point predicted above the limit
is not launched (stored as a failed trial, `not run: ...`, with the prediction in `tune.predicted`).

The model can only speak for a point when a finished trial shares its model section (same parameter count) and
its `recompute` setting (activations per sample are fitted per setting); otherwise the point runs, and the
measured peak decides afterwards (tune.constraint_values: measured above the limit = infeasible).
"""

from __future__ import annotations

from perfbench.errors import UserError
from perfbench.predict.memory import MemoryObservation, fit_memory, memory_settings, observe_memory, predict_memory


def predicted_over_limit(store, study_id: str, run_config: dict, limit_bytes: float) -> dict | None:
    """{peak_bytes, interval, reason} when the point is predicted not to fit, else None (fits, or unknown)."""

    pairs: list[tuple[MemoryObservation, float | None]] = []
    for rec in store.list_runs(sweep=study_id):
        if rec.get("status") != "ok" or (rec.get("config") or {}).get("model") != run_config.get("model"):
            continue
        try:
            pairs.append(observe_memory(store, rec))
        except UserError:
            continue
    target_recompute = bool((run_config.get("train") or {}).get("recompute"))
    if not any(o.recompute == target_recompute for o, _ in pairs):
        return None
    bases = sorted(b for _, b in pairs if b)
    try:
        cal = fit_memory([o for o, _ in pairs], bases[len(bases) // 2] if bases else None)
    except UserError:
        return None
    s = memory_settings(run_config, pairs[0][0].params)
    p = predict_memory(cal, s)
    if p["peak_bytes"] <= limit_bytes:
        return None
    return {
        "peak_bytes": p["peak_bytes"],
        "interval": p["interval"],
        "reason": f"predicted peak memory {p['peak_bytes'] / 1e9:.2f} GB per rank "
        f"({p['interval']['low'] / 1e9:.2f}-{p['interval']['high'] / 1e9:.2f}) is above "
        f"search.constraints peak_memory_gb {limit_bytes / 1e9:g} (memory model fitted on "
        f"{len(pairs)} finished trials)",
    }
