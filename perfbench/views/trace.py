"""One merged, clock-aligned Chrome-trace / Perfetto JSON of a stored run (`perfbench trace RUN -o FILE`).

Built only from the tables the store keeps per run (no raw profiler files):

* a process per rank (`pid` = rank), with threads (tracks) `steps` (one slice per step, from
  `profile_steps`, else the workload's own `workload_steps`), `compute` (the profiler's compute ops from
  `profile_ops`, one track per stream) and `collectives` (every collective of `comm_ops`; without
  `comm_ops`, the profiler's communication ops); other op categories (e.g. HCCL sub-tasks) get a track each;
  the workload's own timed spans (`spans`: forward/backward/send/recv per micro-batch, pipelines and MoE), in
  the profiled steps, get a track `workload spans` (they are stamped with time.time(), the same epoch clock);
* flow arrows (`s`/`t`/`f` events sharing an id) linking the ranks' parts of each collective instance:
  same group, step, op name and occurrence in the step, as analyzers/analyses/slow_ranks.py matches them;
* clocks aligned across ranks. Sweep runs (MindSpore CPU, one host): the profiler stamps ops with the
  host's epoch clock, which every rank shares, so times are kept as recorded. Imported profiles whose ranks
  report one host: the profiler's own (host-synchronised) clock, kept. Imported profiles from several hosts
  (or no host information): each rank is shifted so that the median end of its matched collectives
  coincides with the lowest rank's (a collective ends together on every rank), breadth first through the
  groups (a rank linked only through another rank takes that rank's aligned clock); sets of ranks that share
  no collective are each aligned on their own lowest rank, and the summary says so. The offsets are in the
  trace's `otherData`. `align="none"` or `"collectives"` forces either.

Times are microseconds from the earliest event (the origin, epoch µs, is in `otherData.origin_us`).
`write_trace(store, run_id, dest)` writes it to a path (gzip when it ends in `.gz`) or a binary buffer.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from pathlib import Path
from typing import IO, Any, Iterator

import numpy as np
import pandas as pd

from perfbench.errors import UserError

ALIGN = ("auto", "none", "collectives")
SPAN_TID = 50
STEP_TID, COMPUTE_TID, COMM_TID, OTHER_TID = 1, 100, 200, 300  # communication (stream s) tracks: 201...


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def match_collectives(comm_ops: pd.DataFrame) -> pd.Series:
    """Instance id per comm_ops row (same group, step, op name and k-th occurrence on each rank), or -1
    where fewer than two ranks took part."""
    df = comm_ops[["rank", "step", "op_name", "group", "start_us"]].copy()
    df["group"] = df["group"].fillna("").astype(str)
    df["step"] = pd.to_numeric(df["step"], errors="coerce").fillna(-1)
    df = df.sort_values(["group", "rank", "step", "op_name", "start_us"], kind="stable")
    df["occ"] = df.groupby(["group", "rank", "step", "op_name"]).cumcount()
    inst = df.groupby(["group", "step", "op_name", "occ"]).ngroup()
    ranks = df.groupby(inst)["rank"].transform("nunique")
    return inst.where(ranks >= 2, -1).reindex(comm_ops.index)


def clock_offsets(run: dict, tables: dict[str, pd.DataFrame], align: str) -> tuple[dict[int, float], str]:
    """Per-rank shift (µs, added to that rank's times) and how the clocks were aligned."""
    if align not in ALIGN:
        raise UserError(f"--align {align!r}: must be one of {', '.join(ALIGN)}")
    ranks_t = tables.get("profile_ranks")
    hosts = set(ranks_t["host"].dropna().astype(str)) if ranks_t is not None and "host" in ranks_t else set()
    if align == "auto":
        if run.get("source") == "sweep":
            return {}, "shared clock: every rank ran on one host and the profiler stamps ops with its epoch clock"
        if len(hosts) == 1:
            return {}, f"the profiler's own clock (every rank on host {next(iter(hosts))})"
        align = "collectives"
    if align == "none":
        return {}, "as recorded (no alignment asked)"
    comm = tables.get("comm_ops")
    if comm is None or comm.empty or "elapse_ms" not in comm:
        return {}, "as recorded (no matched collectives to align on)"
    df = comm.assign(inst=match_collectives(comm), end=comm["start_us"] + comm["elapse_ms"] * 1000.0)
    df = df[(df["inst"] >= 0) & df["end"].notna()]
    if df.empty:
        return {}, "as recorded (no matched collectives to align on)"
    ends = df.groupby(["inst", "rank"])["end"].first().unstack()  # instance x rank
    ranks = sorted(int(r) for r in ends.columns)
    offsets: dict[int, float] = {}
    components = []
    for ref in ranks:  # breadth first from the lowest rank not yet aligned: one component per linked set
        if ref in offsets:
            continue
        offsets[ref], frontier, members = 0.0, [ref], [ref]
        while frontier:
            a = frontier.pop(0)
            for r in ranks:
                if r in offsets:
                    continue
                both = ends[[a, r]].dropna()
                if len(both):
                    offsets[r] = offsets[a] + float(np.median(both[a] - both[r]))
                    frontier.append(r)
                    members.append(r)
        components.append(sorted(members))
    how = f"collective ends: each rank shifted so its matched collectives end with rank {ranks[0]}'s (median)"
    if len(components) > 1:
        parts = "; ".join(f"ranks {', '.join(map(str, c))} on rank {c[0]}" for c in components)
        how = (
            f"collective ends, per set of ranks linked by collectives ({parts}; the sets share no collective, "
            "so their clocks are as recorded relative to each other)"
        )
    return offsets, how


def trace_events(run: dict, tables: dict[str, pd.DataFrame], align: str = "auto") -> tuple[Iterator[dict], dict]:
    """The trace's events (a generator) and its summary (counts, alignment, offsets)."""
    ops = tables.get("profile_ops")
    comm = tables.get("comm_ops")
    steps = _step_windows(tables)
    spans = tables.get("spans")
    if (ops is None or ops.empty) and (comm is None or comm.empty) and (spans is None or spans.empty):
        raise UserError(
            f"run {run['run_id']} has no profiled ops or collectives stored: nothing to put in a trace "
            "(was the profiler enabled? failed runs may have none)"
        )
    offsets, how = clock_offsets(run, tables, align)
    frames, skipped = _frames(ops, comm, spans, steps)
    ev, steps, origin = _on_one_clock(frames, steps, offsets)
    tids = _tracks(ev)
    ranks = sorted(set(ev["rank"]) | (set(steps["rank"]) if steps is not None else set()))
    linked = ev[ev["inst"].fillna(-1) >= 0] if "inst" in ev else ev.iloc[:0].assign(inst=[])
    summary = _summary(run, ev, steps, ranks, linked, (how, offsets, origin), skipped)
    return _events(tables, ev, steps, ranks, tids, linked, origin), summary


def _step_windows(tables: dict) -> pd.DataFrame | None:
    """The profiled steps' windows, else the workload's own step records'."""
    steps = tables.get("profile_steps")
    if steps is None or steps.empty:
        ws = tables.get("workload_steps")
        if ws is not None and not ws.empty and {"start_ts", "end_ts"} <= set(ws.columns):
            steps = pd.DataFrame(
                {"rank": ws["rank"], "step": ws["step"], "start_us": ws["start_ts"] * 1e6, "end_us": ws["end_ts"] * 1e6}
            )
    return steps


def _frames(ops, comm, spans, steps) -> tuple[list[pd.DataFrame], int]:
    """One frame each of the profiler's ops, the collectives and the workload's spans; the collectives without a
    start time (not drawn)."""
    has_comm = comm is not None and not comm.empty and "start_us" in comm
    frames = []  # rank, tid, name, ts, dur, cat, args-ish columns
    if ops is not None and not ops.empty:
        o = ops
        cat = o["category"].fillna("other").astype(str) if "category" in o else pd.Series("compute", index=o.index)
        if has_comm:
            o, cat = o[cat != "communication"], cat[cat != "communication"]
        stream = o["stream"] if "stream" in o else pd.Series(0, index=o.index)
        frames.append(
            pd.DataFrame(
                {
                    "rank": o["rank"],
                    "cat": cat,
                    "stream": stream.astype(str),
                    "name": o["name"].astype(str),
                    "type": o.get("type"),
                    "step": o.get("step"),
                    "ts": o["start_us"],
                    "dur": o["dur_us"],
                }
            )
        )
    skipped = 0
    if has_comm:
        placed = comm["start_us"].notna()
        skipped = int((~placed).sum())  # a collective without a start time cannot be drawn
        comm = comm[placed]
        inst = match_collectives(comm)
        frames.append(
            pd.DataFrame(
                {
                    "rank": comm["rank"],
                    "cat": "collective",
                    "stream": "",
                    "name": comm["op_name"].astype(str),
                    "type": comm.get("op_type"),
                    "step": comm.get("step"),
                    "ts": comm["start_us"],
                    "dur": comm["elapse_ms"] * 1000.0,
                    "group": comm.get("group"),
                    "size_bytes": comm.get("size_bytes"),
                    "busbw_gbps": comm.get("busbw_gbps"),
                    "wait_ms": comm.get("wait_ms"),
                    "inst": inst,
                }
            )
        )
    if spans is not None and not spans.empty and {"start_ts", "end_ts", "kind"} <= set(spans.columns):
        if steps is not None and not steps.empty and "step" in spans:  # the profiled window only
            spans = spans.merge(steps[["rank", "step"]].drop_duplicates(), on=["rank", "step"])
        mb = spans["mb"] if "mb" in spans else pd.Series(np.nan, index=spans.index)
        frames.append(
            pd.DataFrame(
                {
                    "rank": spans["rank"],
                    "cat": "span",
                    "stream": "",
                    "name": [f"{k} mb{int(m)}" if not _missing(m) else str(k) for k, m in zip(spans["kind"], mb)],
                    "type": spans["kind"],
                    "step": spans.get("step"),
                    "ts": spans["start_ts"] * 1e6,
                    "dur": (spans["end_ts"] - spans["start_ts"]) * 1e6,
                    "stage": spans.get("stage"),
                }
            )
        )
    return frames, skipped


def _on_one_clock(frames: list[pd.DataFrame], steps, offsets: dict):
    """The events and step windows shifted onto one clock and its origin (the first of them at 0)."""
    ev = pd.concat(frames, ignore_index=True)
    ev = ev[pd.to_numeric(ev["ts"], errors="coerce").notna()].copy()
    ev["rank"] = ev["rank"].astype(int)
    ev["ts"] = ev["ts"].astype(float) + ev["rank"].map(offsets).fillna(0.0)
    ev["dur"] = pd.to_numeric(ev["dur"], errors="coerce").fillna(0.0).clip(lower=0.0)
    if steps is not None and not steps.empty:
        steps = steps.dropna(subset=["start_us", "end_us"]).copy()
        steps["rank"] = steps["rank"].astype(int)
        shift = steps["rank"].map(offsets).fillna(0.0)
        steps["start_us"], steps["end_us"] = steps["start_us"] + shift, steps["end_us"] + shift
    origin = float(min(ev["ts"].min(), steps["start_us"].min() if steps is not None and len(steps) else math.inf))
    ev["ts"] -= origin
    return ev, steps, origin


def _tracks(ev: pd.DataFrame) -> dict[tuple[int, str], int]:
    """Each event's track (thread): collectives, spans, one per (category, stream) for the profiler's ops."""
    named = {"collective": "collectives", "span": "workload spans (forward, backward, send, recv, ...)"}
    ev["track"] = [
        named[c] if c in named else (c if s in ("", "nan", "None") else f"{c} (stream {s})")
        for c, s in zip(ev["cat"], ev["stream"])
    ]
    base = {"collective": COMM_TID, "span": SPAN_TID, "compute": COMPUTE_TID, "communication": COMM_TID + 1}
    tids: dict[tuple[int, str], int] = {}
    for rank, track, cat in sorted(set(zip(ev["rank"], ev["track"], ev["cat"]))):
        same = sum(1 for (r, _t), tid in tids.items() if r == rank and tid // 100 == base.get(cat, OTHER_TID) // 100)
        tids[(rank, track)] = base.get(cat, OTHER_TID) + (0 if cat in ("collective", "span") else same)
    ev["tid"] = [tids[(r, t)] for r, t in zip(ev["rank"], ev["track"])]
    return tids


def _summary(run, ev, steps, ranks, linked, clock, skipped) -> dict[str, Any]:
    """Counts per rank and category, the clock alignment (how, offsets, origin), linked collectives."""
    how, offsets, origin = clock
    summary: dict[str, Any] = {
        "run_id": run["run_id"],
        "ranks": ranks,
        "clock_alignment": how,
        "offsets_us": {str(r): round(v, 3) for r, v in offsets.items()},
        "origin_us": origin,
        "events": {str(r): {} for r in ranks},
        "collectives_linked": int(linked["inst"].nunique()) if len(linked) else 0,
        "flow_events": int(len(linked)),
        "collectives_without_start": skipped,
    }
    for (rank, cat), n in ev.groupby(["rank", "cat"]).size().items():
        summary["events"][str(rank)][cat] = int(n)
    if steps is not None:
        for rank, n in steps.groupby("rank").size().items():
            summary["events"][str(rank)]["step"] = int(n)
    return summary


def _events(tables, ev, steps, ranks, tids, linked, origin) -> Iterator[dict]:
    """The trace's events: process and thread names, steps, slices, then the collectives' flow arrows."""
    host = {}
    pr = tables.get("profile_ranks")
    if pr is not None and "host" in pr:
        host = {int(r): h for r, h in zip(pr["rank"], pr["host"]) if isinstance(h, str) and h}
    for rank in ranks:
        label = f"rank {rank}" + (f" ({host[rank]})" if rank in host else "")
        yield {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}}
        yield {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": STEP_TID, "args": {"name": "steps"}}
    for (rank, track), tid in tids.items():
        yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": track}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}}
    if steps is not None:
        for r in steps.itertuples(index=False):
            yield {
                "ph": "X",
                "cat": "step",
                "name": f"step {int(r.step)}",
                "pid": int(r.rank),
                "tid": STEP_TID,
                "ts": round(float(r.start_us) - origin, 3),
                "dur": round(float(r.end_us - r.start_us), 3),
                "args": {"step": int(r.step)},
            }
    cols = list(ev.columns)
    for row in ev.itertuples(index=False, name=None):
        r = dict(zip(cols, row))
        args = {
            k: r[k]
            for k in ("type", "step", "stage", "group", "size_bytes", "busbw_gbps", "wait_ms")
            if k in r and r[k] is not None and not (isinstance(r[k], float) and math.isnan(r[k]))
        }
        if r["cat"] not in ("collective", "span"):
            args["full_name"] = r["name"]
        args = {k: (v.item() if hasattr(v, "item") else v) for k, v in args.items()}
        yield {
            "ph": "X",
            "cat": r["cat"],
            "name": r["name"].rsplit("/", 1)[-1],
            "pid": int(r["rank"]),
            "tid": int(r["tid"]),
            "ts": round(float(r["ts"]), 3),
            "dur": round(float(r["dur"]), 3),
            "args": args,
        }
    # flow arrows: one chain per collective instance, in start order (s, t..., f), bound to the slices
    for inst, g in linked.sort_values("ts").groupby("inst", sort=True):
        n = len(g)
        for i, r in enumerate(g.itertuples(index=False)):
            ph = "s" if i == 0 else ("f" if i == n - 1 else "t")
            e = {
                "ph": ph,
                "id": int(inst),
                "cat": "collective",
                "name": r.name.rsplit("/", 1)[-1],
                "pid": int(r.rank),
                "tid": COMM_TID,
                "ts": round(float(r.ts), 3),
            }
            if ph != "s":
                e["bp"] = "e"
            yield e


def write_trace(
    store, run_id: str, dest: str | os.PathLike | IO[bytes], *, align: str = "auto", compress: bool | None = None
) -> dict:
    """Write the merged trace of `run_id` (short ids and prefixes work) to `dest`: a path (gzip when it ends
    in `.gz`, or when `compress`) or a binary buffer (e.g. io.BytesIO for a download). Returns the summary."""
    rec = store.get_run(run_id)
    rid = rec["run_id"]
    names = ("profile_ops", "profile_steps", "profile_ranks", "comm_ops", "workload_steps", "spans")
    tables = {n: store.read_table(rid, n) for n in names if n in store.table_names(rid)}
    events, summary = trace_events(rec, tables, align)
    is_path = isinstance(dest, (str, os.PathLike))
    if compress is None:
        compress = is_path and str(dest).endswith(".gz")
    raw = open(dest, "wb") if is_path else dest
    try:
        out = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if compress else raw
        text = io.TextIOWrapper(out, encoding="utf-8", newline="\n", write_through=True)
        other = {k: summary[k] for k in ("run_id", "clock_alignment", "offsets_us", "origin_us")}
        text.write('{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other) + ', "traceEvents": [\n')
        for i, e in enumerate(events):
            text.write((",\n" if i else "") + json.dumps(e, separators=(",", ":")))
        text.write("\n]}\n")
        text.flush()
        text.detach()
        if compress:
            out.close()
    finally:
        if is_path:
            raw.close()
    if is_path:
        summary["path"] = str(Path(dest))
    return summary
