"""Which legacy MindSpore 1.x profiler files a folder holds (by kind and rank), and which a rank lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from perfbench.errors import ProfileFormatError

#: each file kind's name (the rank: its last number)
PATTERNS = {
    "step_trace": re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$"),
    "hccl": re.compile(r"^hccl_raw_(\d+)\.csv$"),
    "pipeline": re.compile(r"^ascend_cluster_analyse_([a-z_-]+?)_(\d+)_(\d+)_(\d+)\.csv$"),
    "timeline": re.compile(r"^output_timeline_data_(\d+)\.txt$"),
    "framework": re.compile(r"^framework_raw_(\d+)\.csv$"),
    "profiler_info": re.compile(r"^profiler_info_(\d+)\.json$"),
    "strategy": re.compile(r"^parallel_strategy_(\d+)\.json$"),
    "flops": re.compile(r"^flops_summary_(\d+)\.json$"),
}
#: file kinds that make a folder a legacy profile on their own
PRIMARY = ("step_trace", "hccl", "pipeline", "timeline")
#: how deep below a given folder scan looks when the folder itself holds none
MAX_DEPTH = 4


def scan(path: Path, deep: bool = True) -> dict[str, dict[int, Path]]:
    """Legacy files in `path` itself; with `deep` and none there, in its sub-folders (up to MAX_DEPTH)."""
    found: dict[str, dict[int, Path]] = {k: {} for k in PATTERNS}
    if path.is_file():
        files = [path]
    else:
        files = sorted(p for p in path.iterdir() if p.is_file())
        if deep and not any(any(PATTERNS[k].match(p.name) for k in PRIMARY) for p in files):
            base = len(path.parts)
            deeper = [p for p in sorted(path.rglob("*")) if len(p.parts) - base <= MAX_DEPTH and p.is_file()]
            dirs = sorted({p.parent for p in deeper if any(PATTERNS[k].match(p.name) for k in PRIMARY)})
            if len(dirs) > 1:
                raise ProfileFormatError(
                    path,
                    f"{len(dirs)} legacy profiler folders below ({', '.join(str(d) for d in dirs[:4])}"
                    f"{' ...' if len(dirs) > 4 else ''}): point at one, or use load_profile",
                )
            files = sorted(p for p in dirs[0].iterdir() if p.is_file()) if dirs else []
    for p in files:
        for kind, rx in PATTERNS.items():
            m = rx.match(p.name)
            if m:
                rank = int(m.group(m.lastindex))
                found[kind].setdefault(rank, p)
    return found


def detect(path) -> bool:
    """True if the folder `path` itself holds legacy MindSpore profiler files."""
    path = Path(path)
    if not path.is_dir():
        return False
    found = scan(path, deep=False)  # load_profile walks folders itself: look at this one only
    return any(found[k] for k in PRIMARY)


def is_primary(name: str) -> bool:
    """A file of a kind that makes a folder a legacy profile on its own."""
    return any(PATTERNS[k].match(name) for k in PRIMARY)


#: file kinds whose content ends up in the Profile (RANKS.inputs lists them per rank)
USED_KINDS = ("step_trace", "hccl", "pipeline", "timeline", "framework", "profiler_info", "strategy")
#: what a rank loses without each kind, and the file name MindSpore gives it
_LOST = {
    "step_trace": ("step_trace_raw_{r}_detail_time.csv", "its step times and the profiler's step trace are unknown"),
    "hccl": ("hccl_raw_{r}.csv", "its collectives' wait/transit split, sizes and links are unknown"),
    "pipeline": ("ascend_cluster_analyse_*_{r}.csv", "the profiler's computation / communication split is unknown"),
    "timeline": ("output_timeline_data_{r}.txt", "it has no op data (computing recomputation impossible)"),
}


def missing_files(found: dict, ranks: list[int], trace: pd.DataFrame | None) -> list[str]:
    """A warning per rank that lacks a file kind other ranks of the same folder have (or, for
    hccl_raw, whose step trace shows collectives), naming the missing file."""
    out = []
    for kind, (pattern, lost) in _LOST.items():
        have = set(found[kind])
        for r in ranks:
            if r in have:
                continue
            evidence = sorted(have)
            if kind == "hccl" and trace is not None and (trace["rank"] == r).any():
                evidence = evidence or ["its step trace lists collectives"]
            if kind == "timeline" and r in found["framework"]:
                evidence = evidence or [f"{found['framework'][r].name} is there"]
            if not evidence:
                continue
            others = ", ".join(map(str, evidence[:6])) + (" ..." if len(evidence) > 6 else "")
            why = f"ranks {others} have theirs" if evidence and isinstance(evidence[0], int) else evidence[0]
            out.append(f"rank {r}: {pattern.format(r=r)} is missing ({why}): {lost}")
    return out
