"""Memory per rank: peaks, the allocations live at the peak, a timeline, and what holds the peak.

Reads the profile's memory tables (analyzers.schema MEMORY / OP_MEMORY / MODULE_MEMORY: Ascend
memory_record / operator_memory / npu_module_mem or their .db tables, MindSpore's CPU memory record), the
workload's step records (`max_rss_bytes`: the process's resident high-water mark, sampled after every step)
and the ranks' meta (machine memory, parameter count, MindSpore's own allocator peak). Unknown is null:
a rank whose files lack memory data has null peaks, never 0.

Tables (one writer: this analysis):
    memory              one row per rank: the peaks (bytes), when the allocator peaked, the capacity
    memory_modules      rank, module, peak_bytes: peak reserved memory per device module (HCCL, RUNTIME, ...;
                        modules whose peak is 0 left out)
    memory_timeline     rank, component, ts_us, allocated_bytes, reserved_bytes: at most ~400 points per rank
                        and component (every local max and min kept), for the Run page's figure
    memory_live         rank, name, size_bytes, alloc_us, release_us: allocations live at the allocator's peak
    memory_attribution  rank, part, bytes, share, source: what holds the rank's peak
Metrics: peak_memory_bytes, memory_headroom (definitions in analyzers/catalogue.py).
"""

from __future__ import annotations


import pandas as pd

from analyzers.context import Context, Output
from analyzers.memory_summary import PROCESS_COMPONENT, framework_component, no_peaks
from analyzers.stats import finite

_num = finite  # the advice rules' name for it (advice_memory imports it), until they import finite

#: bytes per parameter value and optimizer states per parameter (fp32 training; docs/concepts.md)
PARAM_BYTES = 4
OPTIMIZER_STATES = {"momentum": 1, "sgd": 0, "adam": 2, "adamw": 2}
TIMELINE_POINTS = 400

MEMORY_COLUMNS = [
    "rank",
    "host",
    "device",
    "peak_bytes",
    "peak_source",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "peak_active_bytes",
    "peak_process_bytes",
    "peak_rss_bytes",
    "framework_peak_bytes",
    "allocator",
    "peak_at_us",
    "live_allocations",
    "live_bytes",
    "capacity_bytes",
    "params",
    "baseline_bytes",
]


def all_rank_peaks(rec: pd.DataFrame | None) -> dict[int, dict]:
    """Each rank's peaks from its memory records, in one grouped pass (a cluster has thousands of ranks): the
    framework allocator's (allocated, reserved, active, and when allocated peaked: the first record at the
    maximum) and the process's (APP Total Reserved). Ranks without records are absent."""
    if rec is None or not len(rec):
        return {}
    comps = rec.groupby("rank", sort=False)["component"].unique()
    fw_of = {int(r): framework_component(pd.Series(c).dropna()) for r, c in comps.items()}
    out = {r: no_peaks() for r in fw_of}
    num = rec[["rank", "component", "ts_us"]].assign(
        **{c: pd.to_numeric(rec[c], errors="coerce") for c in ("allocated_bytes", "reserved_bytes", "active_bytes")}
    )
    fw = num[num["component"] == num["rank"].map(fw_of)]
    if len(fw):
        peaks = fw.groupby("rank")[["allocated_bytes", "reserved_bytes", "active_bytes"]].max()
        # when the allocator peaked: the first record at the maximum
        at_max = fw[fw["allocated_bytes"] == fw["rank"].map(peaks["allocated_bytes"])]
        when = at_max.groupby("rank")["ts_us"].min()
        for r, p in peaks.iterrows():
            o = out[int(r)]
            o["allocator"] = fw_of[int(r)]
            for c in ("allocated", "reserved", "active"):
                o[f"peak_{c}_bytes"] = finite(p[f"{c}_bytes"])
            if o["peak_allocated_bytes"] is not None:
                o["peak_at_us"] = float(when[r])
    app = num[num["component"] == PROCESS_COMPONENT]
    for r, v in app.groupby("rank")["reserved_bytes"].max().items():
        out[int(r)]["peak_process_bytes"] = finite(v)
    return out


def timelines(rec: pd.DataFrame | None, n: int = TIMELINE_POINTS) -> pd.DataFrame | None:
    """Every rank's and component's memory series, time-ordered, in one grouped pass: a series of at most `n`
    records whole, a longer one cut into n/2 buckets of consecutive records keeping each bucket's max and min
    (of the allocator's allocated bytes; the process's (APP) reserved), the first and the last record: at most
    ~n points, and the peak is never dropped."""
    if rec is None or not len(rec):
        return None
    cols = ["rank", "component", "ts_us", "allocated_bytes", "reserved_bytes"]
    df = rec.sort_values(["rank", "component", "ts_us"], kind="stable")[cols].reset_index(drop=True)
    keys = ["rank", "component"]
    pos = df.groupby(keys, sort=False).cumcount()
    size = df.groupby(keys, sort=False)["ts_us"].transform("size")
    keep = (size <= n) | (pos == 0) | (pos == size - 1)
    big = size > n
    if big.any():
        col = df["reserved_bytes"].where(df["component"] == PROCESS_COMPONENT, df["allocated_bytes"])
        v = pd.to_numeric(col, errors="coerce").fillna(-1)[big]
        by = [df["rank"][big], df["component"][big], (pos * (n // 2) // size)[big]]
        keep |= df.index.isin(set(v.groupby(by).idxmax()) | set(v.groupby(by).idxmin()))
    return df[keep]


def live_at(op_mem: pd.DataFrame, ts_us: float) -> pd.DataFrame:
    """Allocations live at `ts_us`: allocated at or before it and released after it (or never, in the window).

    Largest first; equal sizes in allocation order (the earlier first), then by name, so the order is the data's,
    not the sort algorithm's or the library version's."""
    if op_mem is None or op_mem.empty or ts_us is None:
        return op_mem.iloc[0:0] if op_mem is not None else pd.DataFrame()
    rel = op_mem["release_us"]
    m = (op_mem["alloc_us"] <= ts_us) & (rel.isna() | (rel > ts_us))
    keys = [c for c in ("size_bytes", "alloc_us", "name") if c in op_mem.columns]
    return op_mem[m].sort_values(keys, ascending=[False] + [True] * (len(keys) - 1), kind="stable")


def rank_summaries(prof) -> dict[int, dict]:
    """{rank: `rank_summary`} of the ranks a cluster import read in summary mode (meta "memory_summary")."""
    if prof is None:
        return {}
    meta = prof.meta or {}
    out: dict[int, dict] = {}
    for r, m in (meta.get("rank_meta") or {}).items():
        if isinstance(m, dict) and m.get("memory_summary") is not None:
            out[int(r)] = m["memory_summary"]
    if meta.get("memory_summary") is not None and len(prof.ranks):
        out[int(prof.ranks["rank"].iloc[0])] = meta["memory_summary"]
    return out


def _by_rank(df: pd.DataFrame | None) -> dict[int, pd.DataFrame]:
    """A table's rows per rank (ranks without rows are absent)."""
    if df is None or not len(df):
        return {}
    return {int(k): g for k, g in df.groupby("rank", sort=False)}


def _workload_peaks(ws: pd.DataFrame | None) -> dict[int, float]:
    if ws is None or "max_rss_bytes" not in ws.columns:
        return {}
    # ru_maxrss is the kernel's high-water mark, updated lazily: the resident set read at the same moment can be
    # a little above it, so the rank's peak is the larger of the two over every sample
    s = pd.to_numeric(ws["max_rss_bytes"], errors="coerce")
    if "rss_bytes" in ws.columns:
        s = pd.concat([s, pd.to_numeric(ws["rss_bytes"], errors="coerce")], axis=1).max(axis=1)
    g = s.groupby(ws["rank"]).max().dropna()
    return {int(r): float(v) for r, v in g.items()}


def attribution(
    row: dict, live: pd.DataFrame, modules: pd.DataFrame, optimizer: str | None, shard_params: float | None = None
) -> list[dict]:
    """What holds one rank's peak, as (part, bytes, source) rows. From the profile's allocations where it has
    them (allocations live at the allocator's peak; what was allocated before the profiled window is the
    persistent model state), from the model's own sizes otherwise (parameter count x 4 bytes for parameters
    and gradients, x optimizer states per parameter for the optimizer: of the rank's own ZeRO shard,
    `shard_params`, where the optimizer state is sharded). Parts that cannot be known are left out, not guessed."""
    params = row.get("params")
    states = OPTIMIZER_STATES.get(str(optimizer or "momentum").lower())
    opt_params = params if shard_params is None else shard_params
    model = None
    if params:
        model = {
            "parameters": params * PARAM_BYTES,
            "gradients": params * PARAM_BYTES,
            "optimizer_state": None if states is None else opt_params * PARAM_BYTES * states,
        }
    alloc = row.get("peak_allocated_bytes")
    if alloc is not None and live is not None and len(live) and row.get("peak_at_us") is not None:
        return _from_allocations(row, live, modules, model)
    if model and row.get("peak_bytes"):
        return _from_model_sizes(row, model, params, opt_params, shard_params, states)
    return []


def _from_allocations(row: dict, live: pd.DataFrame, modules, model: dict | None) -> list[dict]:
    """attribution from the allocations live at the allocator's peak (what was allocated before the profiled
    window is the persistent model state, split by the model's sizes where known)."""
    parts: list[tuple[str, float | None, str]] = []
    alloc, reserved = row["peak_allocated_bytes"], row.get("peak_reserved_bytes")
    comm = live["name"].astype(str).str.contains("hcom|hccl|allreduce|allgather|broadcast", case=False, regex=True)
    window = float(live["size_bytes"].sum())
    persistent = max(alloc - window, 0.0)
    if model:
        m = sum(v for v in model.values() if v is not None)
        for k, v in model.items():
            if v is not None:
                parts.append(
                    (
                        k,
                        min(v, persistent * v / m) if m else None,
                        "model sizes (parameter count), within memory allocated before the profiled window",
                    )
                )
        rest = persistent - sum(p[1] or 0 for p in parts)
        if rest > 0:
            parts.append(("other_persistent", rest, "allocated before the profiled window, beyond the model states"))
    else:
        parts.append(
            (
                "model_states",
                persistent,
                "allocated before the profiled window and live at the peak: parameters, gradients, "
                "optimizer state (no parameter count to split them)",
            )
        )
    parts.append(
        (
            "activations",
            float(live.loc[~comm, "size_bytes"].sum()),
            "allocations live at the allocator's peak (operator memory)",
        )
    )
    if comm.any():
        parts.append(
            (
                "communication_buffers",
                float(live.loc[comm, "size_bytes"].sum()),
                "communication-op allocations live at the peak",
            )
        )
    if reserved is not None:
        parts.append(("fragmentation", max(reserved - alloc, 0.0), "allocator reserved - allocated at the peak"))
    if modules is not None and len(modules):
        hccl = modules[modules["module"].astype(str).str.upper() == "HCCL"]["peak_bytes"]
        if len(hccl) and float(hccl.max()) > 0:
            parts.append(("communication_buffers", float(hccl.max()), "HCCL device module, peak reserved"))
    process = row.get("peak_process_bytes")
    held = sum(p[1] or 0 for p in parts)
    if process is not None and process > held:
        parts.append(
            (
                "runtime_other",
                process - held,
                "process (APP) peak minus the parts above: runtime, "
                "other device modules, workspace outside the allocator",
            )
        )
    return _shares(parts, max(process or 0, held + (process - held if process and process > held else 0)))


def _from_model_sizes(row: dict, model: dict, params, opt_params, shard_params, states) -> list[dict]:
    """attribution from the model's own sizes (no profiler allocations): the rest of the peak is activations,
    workspace and buffers together."""
    parts: list[tuple[str, float | None, str]] = []
    peak = row["peak_bytes"]
    alloc, reserved = row.get("peak_allocated_bytes"), row.get("peak_reserved_bytes")
    base = row.get("baseline_bytes")
    if base is not None and str(row.get("peak_source") or "").startswith("workload"):
        parts.append(
            (
                "runtime_baseline",
                float(base),
                "process resident set before the model was built "
                "(MindSpore imported, collectives joined; meta baseline_rss_bytes)",
            )
        )
    for k, v in model.items():
        if v is not None:
            parts.append(
                (
                    k,
                    float(v),
                    (
                        f"model sizes: the rank's ZeRO shard ({opt_params:.0f} of {params:.0f} parameters)"
                        if k == "optimizer_state" and shard_params is not None
                        else "model sizes: parameter count"
                    )
                    + " x 4 bytes (fp32)"
                    + (f" x {states} optimizer states" if k == "optimizer_state" else ""),
                )
            )
    if alloc is not None and reserved is not None and row.get("allocator") != "cpu":
        # (MindSpore's CPU pool reserves 1 GiB up front that is not resident: no fragmentation to speak of)
        parts.append(("fragmentation", max(reserved - alloc, 0.0), "allocator reserved - allocated at the peak"))
    rest = peak - sum(p[1] for p in parts)
    parts.append(
        (
            "activations_workspace",
            max(rest, 0.0),
            "the rest of the peak: activations, workspace, communication buffers, compiled graphs"
            + ("" if base is not None else " and the runtime (libraries)")
            + "; not separable without the profiler's allocations",
        )
    )
    return _shares(parts, peak)


def _shares(parts, total) -> list[dict]:
    merged: dict[str, list] = {}
    for name, b, src in parts:
        if b is None:
            continue
        if name in merged:
            merged[name][0] += b
            merged[name][1] += "; " + src
        else:
            merged[name] = [b, src]
    return [
        {"part": k, "bytes": v[0], "share": (v[0] / total) if total else None, "source": v[1]}
        for k, v in merged.items()
    ]


def capacity_headroom(rows: list[dict], hosts: dict[int, str]) -> float | None:
    """1 - used / capacity, the tightest over the memories the ranks share: ranks on one CPU host share its
    memory (used = sum of their peaks), a device rank has its own (used = its peak)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("peak_bytes") is None or not r.get("capacity_bytes"):
            continue
        key = f"host:{hosts.get(r['rank'])}" if str(r.get("device") or "").lower() == "cpu" else f"rank:{r['rank']}"
        groups.setdefault(key, []).append(r)
    if not groups:
        return None
    return min(1.0 - sum(r["peak_bytes"] for r in g) / g[0]["capacity_bytes"] for g in groups.values())


def _rank_row(r: int, m: dict, pk: dict, host, device, rss, device_capacity) -> dict:
    """A rank's `memory` row: its peaks (`pk`), the workload's numbers (`m`, meta), which peak is the rank's peak
    and the capacity of its memory."""
    row = {
        "rank": r,
        "host": host,
        "device": device or ("cpu" if m else None),
        **pk,
        "peak_rss_bytes": rss,
        "framework_peak_bytes": finite(m.get("framework_peak_allocated_bytes")),
        "params": finite(m.get("params")),
        "baseline_bytes": finite(m.get("baseline_rss_bytes")),
    }
    if row["peak_allocated_bytes"] is None and row["framework_peak_bytes"] is not None:
        row["peak_allocated_bytes"] = row["framework_peak_bytes"]
    if row["peak_process_bytes"] is not None:
        row["peak_bytes"], row["peak_source"] = row["peak_process_bytes"], "profiler: process (APP) reserved"
    elif row["peak_rss_bytes"] is not None:
        row["peak_bytes"], row["peak_source"] = row["peak_rss_bytes"], "workload: process resident high-water mark"
    elif row["peak_reserved_bytes"] is not None:
        row["peak_bytes"], row["peak_source"] = row["peak_reserved_bytes"], "profiler: allocator reserved"
    else:
        row["peak_bytes"], row["peak_source"] = None, None
    row["capacity_bytes"] = (
        finite(m.get("machine_memory_bytes")) if str(row["device"] or "").lower() == "cpu" else device_capacity
    )
    return row


def _rank_detail(r: int, row: dict, m: dict, om, mm, has_peaks: bool, ws, optimizer, parts: dict) -> None:
    """A rank read in full: the allocations live at its peak, its module peaks, its OS timeline where it has no
    memory records and the attribution of its peak, added to `row` and to `parts` (lists of the tables' pieces)."""
    live = live_at(om, row["peak_at_us"]) if om is not None and len(om) else None
    row["live_allocations"] = None if live is None else int(len(live))
    row["live_bytes"] = None if live is None else float(live["size_bytes"].sum())
    if live is not None and len(live):
        parts["live_parts"].append(live[["rank", "name", "size_bytes", "alloc_us", "release_us"]])
    rmods = None
    if mm is not None:
        if len(mm):
            g = pd.to_numeric(mm["reserved_bytes"], errors="coerce").groupby(mm["module"]).max().dropna()
            g = g[g > 0]  # the ~80 modules that never reserved anything are left out
            rmods = pd.DataFrame({"rank": r, "module": g.index, "peak_bytes": g.values})
            parts["mod_rows"].append(rmods)
    if not has_peaks and ws is not None and "rss_bytes" in ws.columns:  # no memory records: the OS's
        g = ws[ws["rank"] == r]
        if len(g):
            parts["tl_parts"].append(
                pd.DataFrame(
                    {
                        "rank": r,
                        "component": "rss",
                        "ts_us": g["end_ts"].astype(float) * 1e6,
                        "allocated_bytes": float("nan"),
                        "reserved_bytes": pd.to_numeric(g["rss_bytes"], errors="coerce"),
                    }
                )
            )
    # parallel.zero_stage >= 1: the rank keeps optimizer state for its own shard only (workloads/parallel/zero.py)
    shard = finite(m.get("zero_shard_params")) if m.get("zero_stage") else None
    for a in attribution(row, live, rmods, optimizer, shard):
        parts["attr_rows"].append({"rank": r, **a})


def analysis(ctx: Context) -> Output:
    prof = ctx.profile
    meta = ctx.meta or {}
    ws = ctx.table("workload_steps")
    rec = ctx.table("memory_records")
    opm = ctx.table("op_memory")
    mod = ctx.table("module_memory")
    ranks: set[int] = set(int(r) for r in meta)
    devices: dict[int, str] = {}
    hosts: dict[int, str] = {}
    if prof is not None and len(prof.ranks):
        for r in prof.ranks.itertuples():
            ranks.add(int(r.rank))
            devices[int(r.rank)] = r.device if isinstance(r.device, str) else None
            hosts[int(r.rank)] = r.host if isinstance(r.host, str) else None
    if ws is not None:
        ranks |= set(int(r) for r in ws["rank"].unique())
    rss = _workload_peaks(ws)
    rows: list[dict] = []
    parts: dict[str, list] = {"live_parts": [], "tl_parts": [], "mod_rows": [], "attr_rows": []}
    tl_parts, mod_rows = parts["tl_parts"], parts["mod_rows"]
    # each table split by rank once (filtering the whole table per rank costs O(ranks x rows))
    opm_by, mod_by = _by_rank(opm), _by_rank(mod)
    peaks_of = all_rank_peaks(rec)
    summaries = rank_summaries(prof)  # ranks read in summary mode: their numbers, no records
    for r, sm in summaries.items():
        ranks.add(r)
        if sm["peaks"] is not None:
            peaks_of[r] = sm["peaks"]
    recorded = timelines(rec)
    if recorded is not None:
        tl_parts.append(recorded)
    optimizer = ((ctx.config or {}).get("train") or {}).get("optimizer")
    # the device's capacity: `device_memory_bytes` of the hardware profile the caller named (perfbench analyze
    # --hardware resolves it from perfbench/predict/hardware/); None without one (an imported profile does not say
    # which hardware profile describes its device)
    device_capacity = finite((ctx.config or {}).get("device_memory_bytes"))
    for r in sorted(ranks):
        m = meta.get(r) or {}
        pk = peaks_of.get(r) or no_peaks()
        if m.get("host"):
            hosts[r] = m["host"]
        row = _rank_row(r, m, pk, hosts.get(r), devices.get(r), rss.get(r), device_capacity)
        sm = summaries.get(r)
        if sm is not None:  # summary mode: the counts only; the live allocations, timeline, attribution on demand
            row["live_allocations"], row["live_bytes"] = sm["live_allocations"], sm["live_bytes"]
            if sm["modules"]:
                names, peaks = zip(*sm["modules"])
                mod_rows.append(pd.DataFrame({"rank": r, "module": list(names), "peak_bytes": list(peaks)}))
            rows.append(row)
            continue
        _rank_detail(r, row, m, opm_by.get(r), mod_by.get(r), r in peaks_of, ws, optimizer, parts)
        rows.append(row)
    tables: dict = {}
    metrics: dict = {}
    if not any(r.get(k) is not None for r in rows for k in ("peak_bytes", "peak_allocated_bytes")):
        return Output(tables={}, metrics={})
    tables["memory"] = pd.DataFrame(rows)[MEMORY_COLUMNS]
    if mod_rows:
        tables["memory_modules"] = pd.concat(mod_rows, ignore_index=True)
    if tl_parts:  # rank by rank (a stable sort keeps each rank's components and times in order)
        tl = pd.concat(tl_parts, ignore_index=True)
        tables["memory_timeline"] = tl.sort_values("rank", kind="stable").reset_index(drop=True)
    if parts["live_parts"]:
        tables["memory_live"] = pd.concat(parts["live_parts"], ignore_index=True)
    if parts["attr_rows"]:
        tables["memory_attribution"] = pd.DataFrame(parts["attr_rows"])
    peaks = [r["peak_bytes"] for r in rows if r["peak_bytes"] is not None]
    metrics["peak_memory_bytes"] = max(peaks) if peaks else None
    metrics["memory_headroom"] = capacity_headroom(rows, hosts)
    return Output(tables=tables, metrics={k: v for k, v in metrics.items() if v is not None})
