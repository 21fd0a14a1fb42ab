"""Replay check: rebuild a profiled rank's step from its own kernels and collectives and compare it with
the step time its profiler wrote (Ascend `step_trace_time`: computing + communication not overlapped + free).

Two streams are replayed (the way the device runs them): compute kernels merged into busy segments (their
union: kernels on different cores that overlap count once), and collectives one after another on the
communication stream. Dependencies come from the recorded order: a collective waits for the compute
segment that ended last before it started, a compute segment waits for every collective that had ended
before it started and is launched one launch gap after whatever it waited for. Variants:

* `critical_path_s`: kernels and collectives with their measured durations, nothing else (what a
  kernel-level model sees: no host time);
* `replay_s`: the same plus one launch gap per compute segment (the rank's median gap between segments)
  and the gap before the first kernel (the profiler's `preparing`);
* `modelled_comm_s`: `replay_s` with every collective's measured time replaced by the model's
  latency x hops + factor x bytes / bandwidth on the hardware profile (default ascend910).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

import analyzers
from perfbench.errors import UserError
from perfbench.predict import comm
from perfbench.predict.hardware import load


def _segments(start: np.ndarray, end: np.ndarray) -> list[tuple[float, float]]:
    order = np.argsort(start, kind="stable")
    segs: list[list[float]] = []
    for s, e in zip(start[order], end[order]):
        if segs and s <= segs[-1][1]:
            segs[-1][1] = max(segs[-1][1], e)
        else:
            segs.append([float(s), float(e)])
    return [(a, b) for a, b in segs]


def replay_step(
    compute: list[tuple[float, float]],
    colls: list[tuple[float, float, float]],
    t0: float,
    gap: float = 0.0,
    lead: float = 0.0,
) -> float:
    """Makespan from t0 of compute segments [(start, end)] and collectives [(start, end, replayed duration)],
    all recorded times; `gap` before every compute segment after the first, `lead` before the first."""
    ev = [(s, 0, i) for i, (s, _) in enumerate(compute)] + [(s, 1, i) for i, (s, _, _) in enumerate(colls)]
    ev.sort()
    c_end = [None] * len(compute)
    m_end = [None] * len(colls)
    tc = t0 + lead
    tm = t0
    first = True
    for _, kind, i in ev:
        if kind == 0:
            s, _ = compute[i]
            deps = [m_end[j] for j, (_, e, _) in enumerate(colls) if e <= s and m_end[j] is not None]
            start = max([tc] + deps) + (0.0 if first else gap)  # launched after whatever it waited for
            first = False
            tc = start + (compute[i][1] - compute[i][0])
            c_end[i] = tc
        else:
            s, _, dur = colls[i]
            before = [c_end[j] for j, (_, e) in enumerate(compute) if e <= s and c_end[j] is not None]
            start = max([tm] + before[-1:]) if before else max(tm, t0 + lead)
            tm = start + dur
            m_end[i] = tm
    return max([tc, tm]) - t0


def replay_profile(profile, hardware=None) -> list[dict]:

    hw = hardware or load("ascend910")
    ref = profile.reference_breakdown
    if ref is None or not len(ref):
        raise UserError(f"{profile.path}: no step_trace_time (the profiler's own step breakdown) to compare with")
    ops = profile.ops
    if ops is None or not len(ops):
        raise UserError(f"{profile.path}: no kernels (kernel_details) to replay")
    steps = profile.steps
    co = profile.comm_ops
    rows = []
    for rec in ref.itertuples(index=False):
        r, st = int(rec.rank), int(rec.step)
        measured = float(np.nansum([rec.computing_us, rec.communication_not_overlapped_us, rec.free_us])) / 1e6
        win = steps[(steps["rank"] == r) & (steps["step"] == st)] if steps is not None and len(steps) else steps
        o = ops[(ops["rank"] == r) & ((ops["step"] == st) if ops["step"].notna().any() else True)]
        comp = o[o["category"] == "compute"]
        if comp.empty:
            continue
        cstart = comp["start_us"].to_numpy(float)
        segs = _segments(cstart, cstart + comp["dur_us"].to_numpy(float).clip(min=0))
        c = co[(co["rank"] == r) & (co["step"] == st)] if co is not None and len(co) else pd.DataFrame()
        colls, modelled, transit = [], [], 0.0
        for x in c.itertuples(index=False):
            s0, dur = float(x.start_us), float(x.elapse_ms) * 1e3
            transit += float(x.transit_ms) / 1e3 if pd.notna(x.transit_ms) else 0.0
            colls.append((s0, s0 + dur, dur))
            n = int(x.group_size) if pd.notna(x.group_size) else 2
            link = hw.link(n)
            lat, byt = comm.cost(
                comm.Collective(str(x.op_type), n, float(x.size_bytes or 0)), link.latency_us, link.bandwidth_gbps * 1e3
            )
            modelled.append((s0, s0 + dur, lat + byt))  # microseconds
        t0 = (
            float(win["start_us"].iloc[0])
            if win is not None and len(win)
            else min(cstart.min(), min([s for s, _, _ in colls], default=np.inf))
        )
        first = min([segs[0][0]] + [s for s, _, _ in colls])
        lead = max(0.0, first - t0)
        gaps = (
            np.diff([a for a, _ in segs]) - np.array([b - a for a, b in segs[:-1]])
            if len(segs) > 1
            else np.array([0.0])
        )
        gap = float(np.median(np.clip(gaps, 0, None)))
        crit = replay_step(segs, colls, t0) / 1e6
        rep = replay_step(segs, colls, t0, gap, lead) / 1e6
        mod = replay_step(segs, modelled, t0, gap, lead) / 1e6 if colls else None
        rows.append(
            {
                "rank": r,
                "step": st,
                "measured_s": measured,
                "kernels": int(len(comp)),
                "segments": len(segs),
                "collectives": len(colls),
                "launch_gap_us": gap,
                "preparing_us": lead,
                "critical_path_s": crit,
                "critical_path_error": crit / measured - 1,
                "replay_s": rep,
                "replay_error": rep / measured - 1,
                "modelled_comm_s": mod,
                "modelled_comm_error": None if mod is None else mod / measured - 1,
                "measured_comm_s": sum(d for _, _, d in colls) / 1e6,
                "measured_transit_s": transit,
                "modelled_comm_total_s": sum(d for _, _, d in modelled) / 1e6,
                "hardware": hw.name,
            }
        )
    if not rows:
        raise UserError(f"{profile.path}: no rank step has both compute kernels and the profiler's step breakdown")
    return rows


def replay_path(path: str, hardware: str | None = None) -> list[dict]:

    return replay_profile(analyzers.load_profile(path), load(hardware) if hardware else None)
