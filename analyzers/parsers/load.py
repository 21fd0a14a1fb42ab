"""Format detection, rank discovery and parallel per-rank parsing: `load_profile(path) -> Profile`.

`path` may be one rank's folder, its ASCEND_PROFILER_OUTPUT folder, or any folder holding many ranks
(found by walking it). Formats come from the one registry, `analyzers.parsers.formats` (the
`ProfileFormat` protocol: name, detect(dir) -> bool, parse(dir, **kw) -> Profile, per_rank), tried in
its order. `detect` must look only at `dir` itself (its own files / direct children), never deep. The walk is
top-down: the first format whose `detect` accepts a folder claims it and the walk does not descend
into it. `per_rank=True` formats parse one rank per claimed folder; the folders are parsed in
parallel (processes) and merged. `per_rank=False` formats parse a whole claimed folder into a
(possibly multi-rank) Profile.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import pandas as pd

from analyzers.groups import group_ranks
from analyzers.parsers.formats import ProfileFormat, formats
from analyzers.schema import TABLES, Columns, Profile, conform, empty, frames
from perfbench.errors import ProfileFormatError, UserError


def find_units(path: str | os.PathLike) -> list[tuple[str, Path]]:
    """(format name, folder) for every profiler output under `path`, in walk order."""
    registered = formats()
    root = Path(path)
    if not root.exists():
        raise UserError(f"{root}: no such file or directory")
    if root.is_file():
        root = root.parent
    if root.name == "ASCEND_PROFILER_OUTPUT":
        root = root.parent
    units: list[tuple[str, Path]] = []
    for dirpath, dirnames, _ in os.walk(root):
        d = Path(dirpath)
        hit = next((f for f in registered if _safe_detect(f, d)), None)
        if hit is not None:
            units.append((hit.name, d))
            dirnames[:] = []
            continue
        dirnames[:] = sorted(x for x in dirnames if not x.startswith("."))
    return units


def _safe_detect(f: ProfileFormat, d: Path) -> bool:
    try:
        return bool(f.detect(d))
    except (OSError, ProfileFormatError):
        return False


def _parse_unit(fmt_name: str, d: str, opts: dict):
    """Worker: returns ("ok", Profile) or ("error", path, problem) (exceptions with custom __init__ don't pickle)."""
    fmt = next(f for f in formats() if f.name == fmt_name)
    try:
        return ("ok", fmt.parse(Path(d), **opts))
    except ProfileFormatError as exc:
        return ("error", exc.path, exc.problem)
    except UserError as exc:
        return ("error", d, str(exc))


#: formats that, found beside rank folders, are a cross-check of them (msprof-analyze's own output) rather than ranks
CROSS_CHECK_FORMATS = ("msprof-analyze-cluster",)

#: what a rank loses without a file its peers have (for the warning that names the missing file)
LOST_WITHOUT = {
    "kernel_details.csv": "kernels",
    "trace_view.json": "host step starts and collective sizes",
    "step_trace_time.csv": "the profiler's own step breakdown",
    "communication.json": "per-op communication times and bandwidths",
    "communication_matrix.json": "communication links",
    "analysis.db": "the profiler's breakdown and communication analyses",
    "ascend_*_profiler_*.db": "kernels, steps and collective sizes",
}


#: with kernels="auto", clusters up to this many ranks read every rank's kernels; larger ones read the
#: kernels of this many ranks (spread over the cluster) as the cross-check of the profiler's step trace
KERNEL_CROSS_CHECK_RANKS = 2
#: with detail="auto", clusters up to this many ranks keep every rank's memory records (timeline, live allocations)
DETAIL_RANKS = 8


def load_profile(
    path: str | os.PathLike,
    *,
    workers: int | None = None,
    read_trace="auto",
    hints: dict | None = None,
    strict: bool = False,
    kernels: str = "auto",
    progress: Callable[[int, int], None] | None = None,
    detail: str = "all",
) -> Profile:
    """Find every rank under `path`, parse them (in parallel when there are several) and merge.
    `hints` are facts a parser may use when it accepts them: `workload_steps` (the workload's own step
    records, for step windows on CPU profiles) and `meta` (e.g. world size, collective dtype).

    Every rank is analyzed with what it has: a damaged or missing file on a rank, or a rank that cannot
    be read at all while others can, becomes a warning naming the file (`Profile.warnings`); only when
    nothing can be read is it an error. `strict=True` turns the first warning into an error.
    msprof-analyze's output (`cluster_analysis_output/`) found beside rank folders is read as a
    cross-check (`meta["cluster_output"]`), not as more ranks.

    `kernels`: "all" reads every rank's kernels (kernel_details.csv / trace_view.json / the profiler db);
    "auto" (default) does so up to KERNEL_CROSS_CHECK_RANKS ranks, and in a larger cluster only for that
    many ranks spread over it (the first and the last) plus every rank without the profiler's step trace: the step
    trace is the breakdown, the kernels only its cross-check and the kernel tables (whose `ranks` column says how
    many ranks they cover), so the import stays fast at hundreds of ranks; in summary mode (`detail`) a cluster
    larger than that reads no kernels of its sample (as "none": a real-size rank's kernel_details.csv costs more than
    all its other files), only the sample's trace_view.json for the collective sizes (`kernels="all"` or "auto"
    with detail="all" read the kernels);
    "none" reads no kernels where the step trace is there. `ranks.inputs` says what each rank was read from.

    `workers`: processes parsing the ranks (default `default_workers`: one, in-process, up to a few hundred
    light ranks; more for bigger clusters or many ranks with kernels). `progress(done, total)` is called as
    ranks are parsed (units parsed so far, units found).

    `detail`: "all" (default) keeps every rank's memory records; "summary" reads each rank's memory_record.csv alone and
    reduces it to the rank's peaks while reading it (the memory analysis's `memory` table; the live allocations at
    the peak and the module peaks, from operator_memory.csv and npu_module_mem.csv, are left unknown) and keeps no
    records (the per-rank detail is computed on demand); "auto" is "summary" above DETAIL_RANKS ranks."""
    units = find_units(path)
    if not units:
        raise UserError(
            f"{path}: no profiler output found (looked for ASCEND_PROFILER_OUTPUT/ with kernel_details.csv, "
            "step_trace_time.csv, communication.json, trace_view.json, analysis.db or "
            "ascend_*_profiler_*.db, PyTorch profiler traces (*.pt.trace.json[.gz]), and the other registered formats)"
        )
    checks = [u for u in units if u[0] in CROSS_CHECK_FORMATS]
    if len(checks) < len(units):
        units = [u for u in units if u[0] not in CROSS_CHECK_FORMATS]
    else:
        checks = []
    n = len(units)
    opts = {"read_trace": read_trace, "hints": hints or {}}
    summary = detail == "summary" or (detail == "auto" and n > DETAIL_RANKS)
    if summary:
        opts["memory_detail"] = False
    sizes: set[int] = set()
    if summary and kernels == "auto" and n > KERNEL_CROSS_CHECK_RANKS:  # the sample reads its collective sizes only
        light = _light_units(units, "none")
        sizes = light - _light_units(units, "auto")
    else:
        light = _light_units(units, kernels)
    tasks = [
        (f, str(d), dict(opts, read_kernels=i not in light, **({"read_sizes": True} if i in sizes else {})))
        for i, (f, d) in enumerate(units)
    ]
    if workers is None:
        memory = sum(
            1 for f, d in units if f == "ascend-text" and (d / "ASCEND_PROFILER_OUTPUT" / MEMORY_FILE).exists()
        )
        workers = default_workers(n, n - len(light), memory)
    workers = max(1, int(workers))
    results = _parse_all(tasks, workers, progress)
    parts = [res[1] for res in results if res[0] == "ok"]
    failed = [res for res in results if res[0] == "error"]
    if not parts:
        raise ProfileFormatError(failed[0][1], failed[0][2])
    profile = merge_profiles(parts, path)
    profile.warnings = [f"{p}: {problem} (this rank is not analyzed)" for _, p, problem in failed] + profile.warnings
    if checks:
        _attach_cross_check(profile, checks)
    if strict and profile.warnings:
        more = f" (and {len(profile.warnings) - 1} more warnings)" if len(profile.warnings) > 1 else ""
        raise UserError(f"{profile.warnings[0]}{more} [--strict]")
    return profile


#: parse cost of a rank whose kernels are read (kernel_details.csv, trace_view.json), in light ranks (step
#: trace + communication files, ~1 ms each): measured ~60 vs ~0.7 ms on set B level1's ranks
HEAVY_RANK_COST = 80
#: added cost of a rank with memory files, in light ranks: ~7 ms for a real-size rank's 1.5 MB memory_record.csv
#: read by Arrow (a summary-mode import reads that file alone; a full import its other memory files too)
MEMORY_RANK_COST = 8
#: the memory file whose presence marks a rank as having memory data (analyzers.parsers.ascend.memory)
MEMORY_FILE = "memory_record.csv"
#: light-rank equivalents one more worker process must have to parse before it pays for its start and for
#: sending its tables back (~0.1-0.2 s on 2 cores)
RANKS_PER_WORKER = 384


def default_workers(units: int, heavy: int, memory: int = 0) -> int:
    """Worker processes for parsing `units` ranks of which `heavy` read their kernels and `memory` have memory
    files: 1 (in-process) until the parse is worth splitting, then one per RANKS_PER_WORKER light-rank
    equivalents, at most one per CPU and 16."""
    cost = (units - heavy) + heavy * HEAVY_RANK_COST + memory * MEMORY_RANK_COST
    return max(1, min(os.cpu_count() or 1, 16, units, -(-cost // RANKS_PER_WORKER)))


def _parse_chunk(tasks: list[tuple]) -> list:
    """Worker: parse a chunk of units and pack their small tables (see `_pack`)."""
    results = [_parse_unit(*t) for t in tasks]
    _pack([r[1] for r in results if r[0] == "ok"])
    return results


def _pack(parts: list[Profile]) -> None:
    """Turn each run of consecutive parts whose table is `Columns` into one DataFrame held by the run's first
    part (the others keep an empty table). merge_profiles only concatenates tables in order, so the merged
    Profile is the same; a worker sends back one DataFrame per table and chunk instead of thousands of lists.
    Each part keeps the ids of its own ranks (`_OWN_RANKS`), so merge_profiles pairs every rank with its own meta
    (its memory summary, inputs, versions), not the run's first part's."""
    for p in parts:
        setattr(p, _OWN_RANKS, _rank_ids(p))
    for name in ("ranks", "steps", "ops", "comm_ops", "comm_bandwidth", "links", "reference_breakdown") + MEMORY_TABLES:
        run: list[Profile] = []
        for p in parts + [None]:
            t = getattr(p, name) if p is not None else None
            if isinstance(t, Columns):
                run.append(p)
                continue
            if len(run) > 1:
                tabs = [getattr(q, name) for q in run]
                setattr(run[0], name, frames([x for x in tabs if len(x)] or tabs[:1])[0])
                for q in run[1:]:
                    setattr(q, name, Columns())
            run = []


def _parse_all(tasks: list[tuple], workers: int, progress) -> list:
    """Results of `_parse_unit` for every task, in order: in-process, or in `workers` processes (fork) taking
    chunks of tasks. `progress(done, total)` after each rank (in-process) or chunk."""
    n = len(tasks)
    report = progress or (lambda done, total: None)
    if workers <= 1 or n <= 1:
        results = []
        for i, t in enumerate(tasks):
            results.append(_parse_unit(*t))
            report(i + 1, n)
        return results
    size = max(1, min(64, -(-n // (workers * 4))))
    chunks = [tasks[i : i + size] for i in range(0, n, size)]
    results = []
    with ProcessPoolExecutor(
        max_workers=min(workers, len(chunks)), mp_context=multiprocessing.get_context("fork")
    ) as pool:
        for got in pool.map(_parse_chunk, chunks):
            results.extend(got)
            report(len(results), n)
    return results


def _light_units(units: list[tuple[str, Path]], kernels: str) -> set[int]:
    """Indexes of the units whose kernels are not read (see load_profile's `kernels`)."""
    if kernels not in ("auto", "all", "none"):
        raise UserError(f"kernels={kernels!r}: expected auto, all or none")
    if kernels == "all":
        return set()
    with_trace = [
        i
        for i, (f, d) in enumerate(units)
        if f in ("ascend-text", "ascend-db")
        and (
            (d / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").exists()
            or (d / "ASCEND_PROFILER_OUTPUT" / "analysis.db").exists()
        )
    ]
    if kernels == "none":
        return set(with_trace)
    if len(units) <= KERNEL_CROSS_CHECK_RANKS:
        return set()
    k = KERNEL_CROSS_CHECK_RANKS
    keep = {with_trace[round(j * (len(with_trace) - 1) / (k - 1))] for j in range(k)} if with_trace else set()
    return set(with_trace) - keep


def _attach_cross_check(profile: Profile, checks: list[tuple[str, Path]]) -> None:
    """msprof-analyze's cluster output beside the ranks: kept whole in meta["cluster_output"] (its
    reference_breakdown, comm_ops, links and the files read) for the cluster cross-check analysis."""
    for name, d in checks:
        res = _parse_unit(name, str(d), {})
        if res[0] == "error":
            profile.warnings.append(f"{res[1]}: {res[2]} (msprof-analyze output not used as a cross-check)")
            continue
        c = res[1]
        profile.meta.setdefault(
            "cluster_output",
            {
                "path": str(d),
                "reference_breakdown": c.reference_breakdown,
                "comm_ops": c.comm_ops,
                "links": c.links,
                "inputs": c.meta.get("inputs", []),
            },
        )
        profile.warnings.extend(c.warnings)


#: attribute a packed part (`_pack`) carries: the ids of the ranks it was parsed from
_OWN_RANKS = "_own_ranks"


def _rank_ids(p: Profile) -> list:
    own = getattr(p, _OWN_RANKS, None)
    if own is not None:
        return list(own)
    t = p.ranks
    if t is None or not len(t):
        return []
    if isinstance(t, Columns):
        return list(t.data.get("rank", []))
    return t["rank"].tolist() if "rank" in t else []


#: the memory tables (a text export's are `Columns` while ranks are parsed)
MEMORY_TABLES = ("memory_records", "op_memory", "module_memory")
#: the Profile tables merged across parts (rank-level tables, concatenated)
MERGED_TABLES = (
    "ranks",
    "steps",
    "ops",
    "comm_ops",
    "comm_bandwidth",
    "links",
    "memory_records",
    "op_memory",
    "module_memory",
)


def merge_profiles(parts: list[Profile], path) -> Profile:
    """One Profile from the parsed parts (one per rank for per-rank formats), in order. A part's tables may
    be `Columns` (analyzers.schema): runs of them become one DataFrame per table."""
    if len(parts) == 1:  # plug-in parsers may leave optional schema columns out
        p = parts[0]
        for name in MERGED_TABLES:
            df = getattr(p, name)
            if isinstance(df, Columns):
                df = frames([df])[0] if len(df) else empty(TABLES[name])
            setattr(p, name, conform(df if df is not None else pd.DataFrame(), TABLES[name]))
        if isinstance(p.reference_breakdown, Columns):
            p.reference_breakdown = frames([p.reference_breakdown])[0] if len(p.reference_breakdown) else None
        p.warnings = list(getattr(p, "warnings", None) or [])
        p.meta["reference_sources"] = _reference_sources([p])
        _fill_group_sizes(p)
        _fill_world_size(p)
        return p
    seen: dict[int, str] = {}
    for p in parts:
        for r in _rank_ids(p):
            if r in seen:
                raise UserError(
                    f"rank {r} found twice under {path}: {seen[r]} and {p.path} "
                    "(point at one run's folder, or fix rank_id in profiler_info_*.json)"
                )
            seen[r] = p.path
    sources = sorted({p.source for p in parts})
    merged = Profile(source=sources[0] if len(sources) == 1 else "+".join(sources), path=str(path))
    for name in MERGED_TABLES:
        fr = frames([getattr(p, name) for p in parts if getattr(p, name) is not None and len(getattr(p, name))])
        if fr:
            setattr(merged, name, conform(pd.concat(fr, ignore_index=True) if len(fr) > 1 else fr[0], TABLES[name]))
    refs = frames(
        [p.reference_breakdown for p in parts if p.reference_breakdown is not None and len(p.reference_breakdown)]
    )
    merged.reference_breakdown = (pd.concat(refs, ignore_index=True) if len(refs) > 1 else refs[0]) if refs else None
    merged.meta = {"formats": sources, "rank_meta": {}}
    for p in parts:
        for r in _rank_ids(p):
            merged.meta["rank_meta"][int(r)] = p.meta
    first = parts[0].meta
    for k in ("producer", "npu", "cann_version", "torch_npu_version", "mindspore_version"):
        if k in first:
            merged.meta[k] = first[k]
    groups: dict = {}
    for p in parts:
        groups.update(p.meta.get("parallel_groups") or {})
    merged.meta["parallel_groups"] = groups
    merged.meta["reference_sources"] = _reference_sources(parts)
    merged.warnings = [w for p in parts for w in (getattr(p, "warnings", None) or [])] + _missing_file_warnings(parts)
    _fill_group_sizes(merged)
    _fill_world_size(merged)
    return merged


#: a missing file is no loss when the rank has these instead (the text and db exports hold the same data)
STANDS_IN_FOR = {
    "kernel_details.csv": ("ascend_*_profiler_*.db",),
    "trace_view.json": ("ascend_*_profiler_*.db",),
    "step_trace_time.csv": ("analysis.db",),
    "communication.json": ("analysis.db",),
    "communication_matrix.json": ("analysis.db",),
    "analysis.db": ("step_trace_time.csv", "communication.json"),
    "ascend_*_profiler_*.db": ("kernel_details.csv",),
}


def _reference_sources(parts: list[Profile]) -> list[str]:
    """What the profiler's own breakdown was read from, for the console and `source.reference`: each
    parser's meta["reference_source"]; a parser that gives a breakdown without naming its file is labelled
    by its format, never by another format's file name."""
    out = set()
    for p in parts:
        if p.reference_breakdown is None or not len(p.reference_breakdown):
            continue
        out.add(p.meta.get("reference_source") or f"{p.source} files")
    return sorted(out)


def _missing_file_warnings(parts: list[Profile]) -> list[str]:
    """A rank without a file that other ranks have (and nothing standing in for it): say which, and what it
    loses. Parsers list the files they look for in meta["files_present"]."""
    out = []
    union: set = set()
    for p in parts:
        union.update(p.meta.get("files_present") or ())
    for p in parts:
        if "files_present" not in p.meta:
            continue
        have = set(p.meta["files_present"])
        for f in sorted(union - have):
            alt = STANDS_IN_FOR.get(f, ())
            if alt and all(x in have for x in alt):
                continue
            out.append(
                f"{p.path}: no {f} (other ranks have it): {LOST_WITHOUT.get(f, 'its data')} unknown for this rank"
            )
    return out


def _fill_world_size(p: Profile) -> None:
    if len(p.ranks):
        ws = p.ranks["world_size"]
        p.ranks["world_size"] = ws.fillna(len(p.ranks)).astype("Int64")


def _fill_group_sizes(p: Profile) -> None:
    """group_size per comm group: profiler metadata, else the ranks seen in the communication matrix,
    else the number of profiled ranks that ran the group's collectives."""
    co = p.comm_ops
    if co is None or not len(co):
        return
    sizes: dict[str, int] = {}
    for g, entry in (p.meta.get("parallel_groups") or {}).items():
        if group_ranks(entry):
            sizes[str(g)] = len(group_ranks(entry))
    if p.links is not None and len(p.links):
        lk = p.links[p.links["group"].astype(str) != ""]
        for g, sub in lk.groupby(lk["group"].astype(str)):
            if g not in sizes:
                sizes[g] = int(pd.concat([sub["src"], sub["dst"]]).nunique())
    seen = co.groupby(co["group"].astype(str))["rank"].nunique().to_dict()
    gs = co["group"].astype(str).map(lambda g: sizes.get(g, seen.get(g)) if g else seen.get(g))
    co["group_size"] = co["group_size"].fillna(pd.Series(gs, index=co.index)).astype("Int64")
