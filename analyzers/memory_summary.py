"""One rank's memory numbers from its memory tables' columns, in NumPy (no DataFrames): the peaks and the counts a
cluster import keeps per rank while reading (summary mode, analyzers/parsers/ascend/text.py) and the names both the
parsers and the memory analysis (analyzers/analyses/memory.py) read memory records by: the framework allocator's
component and the process's. Schema sub-layer: it imports nothing else of `analyzers/`."""

from __future__ import annotations

import numpy as np

#: the framework allocator's component in memory records, most inclusive first (torch_npu writes PTA, GE and
#: their sum PTA+GE; MindSpore on Ascend MINDSPORE / MindSpore; MindSpore's CPU profiler "cpu")
FRAMEWORK_COMPONENTS = ("PTA+GE", "MINDSPORE", "MindSpore", "PTA", "GE", "cpu")
#: the whole process on the device
PROCESS_COMPONENT = "APP"


def framework_component(components) -> str | None:
    have = set(components)
    return next((c for c in FRAMEWORK_COMPONENTS if c in have), None)


def no_peaks() -> dict:
    """The peaks of a rank without memory records: all unknown."""
    keys = ("allocator", "peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes", "peak_at_us")
    return dict.fromkeys((*keys, "peak_process_bytes"))


def rank_summary(rec: dict | None, opm: dict | None, mod: dict | None) -> dict:
    """One rank's memory summary from its tables' columns ({column: NumPy array}: MEMORY, OP_MEMORY,
    MODULE_MEMORY, any may be None), in NumPy without building DataFrames (a cluster import computes it per
    rank while reading and keeps no records): {"peaks": as `analyses.memory.all_rank_peaks` gives for the rank,
    or None without records; "live_allocations", "live_bytes": the allocations live at the allocator's peak as the
    `memory` table counts them (None without allocation rows); "modules": [(module, peak reserved bytes > 0)]
    sorted by module}. The same numbers as the memory analysis computes from the whole tables
    (tests/integration/test_memory_summary.py)."""
    out: dict = {"peaks": None, "live_allocations": None, "live_bytes": None, "modules": []}
    if rec is not None and len(rec["ts_us"]):
        comp = rec["component"]
        have = _texts(comp)
        fw = framework_component([c for c in FRAMEWORK_COMPONENTS if c in have])
        pk = no_peaks()
        if fw is not None:
            sel = _equal(comp, fw)
            pk["allocator"] = fw
            for c in ("allocated", "reserved", "active"):
                pk[f"peak_{c}_bytes"] = _nanmax(np.asarray(rec[f"{c}_bytes"], dtype="float64")[sel])
            if pk["peak_allocated_bytes"] is not None:
                alloc = np.asarray(rec["allocated_bytes"], dtype="float64")[sel]
                ts = np.asarray(rec["ts_us"], dtype="float64")[sel][alloc == pk["peak_allocated_bytes"]]
                ts = ts[~np.isnan(ts)]
                pk["peak_at_us"] = float(ts.min()) if len(ts) else float("nan")
        app = _equal(comp, PROCESS_COMPONENT)
        if app.any():
            pk["peak_process_bytes"] = _nanmax(np.asarray(rec["reserved_bytes"], dtype="float64")[app])
        out["peaks"] = pk
    if opm is not None and len(opm["alloc_us"]):
        t = (out["peaks"] or {}).get("peak_at_us")
        if t is None:
            out["live_allocations"], out["live_bytes"] = 0, 0.0
        else:
            alloc = np.asarray(opm["alloc_us"], dtype="float64")
            rel = np.asarray(opm["release_us"], dtype="float64")
            live = (alloc <= t) & (np.isnan(rel) | (rel > t))
            size = np.asarray(opm["size_bytes"], dtype="float64")[live]
            out["live_allocations"] = int(live.sum())
            out["live_bytes"] = float(np.nansum(size)) if len(size) else 0.0
    if mod is not None and len(mod["ts_us"]):
        names = mod["module"]
        reserved = np.asarray(mod["reserved_bytes"], dtype="float64")
        if _is_dictionary(names):  # one grouped pass over the codes
            out["modules"] = _module_peaks(names, reserved)
            return out
        for m in sorted(_texts(names)):
            v = _nanmax(reserved[_equal(names, m)])
            if v is not None and v > 0:
                out["modules"].append((m, v))
    return out


def _is_dictionary(col) -> bool:
    if isinstance(col, np.ndarray):
        return False
    import pyarrow as pa

    return isinstance(col, pa.DictionaryArray)


def _module_peaks(names, reserved) -> list:
    """[(module, peak reserved bytes > 0)] sorted by module from a dictionary-encoded module column: the max of
    each distinct (stripped) name's rows in one pass, as the per-module `_nanmax` gives."""
    values = names.dictionary.to_pylist()
    uniq = sorted({v for v in values if isinstance(v, str)})
    pos = {v: i for i, v in enumerate(uniq)}
    remap = np.array([pos.get(v, -1) if isinstance(v, str) else -1 for v in values], dtype="int64")
    group = remap[names.indices.to_numpy(zero_copy_only=False)]
    keep = (group >= 0) & ~np.isnan(reserved)
    best = np.full(len(uniq), -np.inf)
    np.maximum.at(best, group[keep], reserved[keep])
    return [(m, float(v)) for m, v in zip(uniq, best) if np.isfinite(v) and v > 0]


def _texts(col) -> set[str]:
    """The distinct strings of a text column (a NumPy object array or an Arrow array)."""
    if isinstance(col, np.ndarray):
        return {v for v in col if isinstance(v, str)}
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.DictionaryArray):  # (the memory files' typed read: every dictionary value occurs)
        return {v for v in col.dictionary.to_pylist() if isinstance(v, str)}
    return {v for v in pc.unique(col).to_pylist() if isinstance(v, str)}


def _equal(col, value: str):
    """Boolean NumPy mask of a text column's cells equal to `value`."""
    if isinstance(col, np.ndarray):
        return col == value
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(col, pa.DictionaryArray):  # compare the codes with those of the values equal to `value`
        codes = [i for i, v in enumerate(col.dictionary.to_pylist()) if v == value]
        idx = col.indices.to_numpy(zero_copy_only=False)
        return np.isin(idx, codes) if len(codes) != 1 else idx == codes[0]

    return pc.fill_null(pc.equal(col, value), False).to_numpy(zero_copy_only=False)


def _nanmax(a) -> float | None:
    """The largest number of `a`, None when it has none (as pandas' max of a group, then `stats.finite`)."""
    a = a[~np.isnan(a)]
    return float(a.max()) if len(a) else None
