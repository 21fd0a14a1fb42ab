"""A folder holding loose legacy MindSpore files and msprof jobs (PROF_*) below: both read, each rank from the
richer source."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analyzers.parsers.msprof.files import find_units as msprof_units
from analyzers.parsers.msprof.parser import parse as msprof_parse
from analyzers.schema import Profile
from perfbench.errors import ProfileFormatError


def _richness(p: Profile, rank: int) -> tuple:
    """What a Profile holds for one rank: (op data, collectives, step windows, profiler breakdown)."""

    def has(df):
        return df is not None and len(df) and bool((df["rank"] == rank).any())

    return (has(p.ops), has(p.comm_ops), has(p.steps), has(p.reference_breakdown))


_WHAT = ("op data", "collectives", "step windows", "the profiler's breakdown")


def with_msprof_below(legacy: Profile, path: Path) -> Profile:
    """`legacy` plus the msprof jobs (PROF_*) below `path`. A rank found in both keeps the richer
    source (op data first, then collectives, steps, breakdown; msprof on a tie) and a warning names the
    files not used; every other rank of either source is kept."""

    if not msprof_units(path):
        return legacy
    try:
        mp = msprof_parse(path)
    except ProfileFormatError as exc:  # the loose files are still good: keep them, say what was lost
        legacy.warnings = list(getattr(legacy, "warnings", [])) + [
            f"{exc.path}: {exc.problem} (the msprof jobs under {path} are not read; its legacy files are)"
        ]
        return legacy
    warnings = list(getattr(legacy, "warnings", [])) + list(getattr(mp, "warnings", []))
    lr, mr = set(legacy.ranks["rank"].astype(int)), set(mp.ranks["rank"].astype(int))
    keep_legacy = set(lr)
    for r in sorted(lr & mr):
        a, b = _richness(legacy, r), _richness(mp, r)
        if a > b:
            lost, used = mp, legacy
        else:
            (
                lost,
                used,
            ) = legacy, mp
            keep_legacy.discard(r)
        lost_files = lost.ranks.loc[lost.ranks["rank"] == r, "inputs"].iloc[0] if "inputs" in lost.ranks else ""
        used_what = ", ".join(w for w, h in zip(_WHAT, _richness(used, r)) if h) or "nothing more"
        warnings.append(
            f"rank {r}: two profiler outputs under {path} hold rank {r}: "
            f"{'the msprof job' if used is mp else 'the MindSpore legacy files'} ({used_what}) is used, "
            f"{lost_files or 'the other'} ({'legacy' if lost is legacy else 'msprof'}) is not "
            "(point at the folder of the one you want to read it alone)"
        )
    keep_msprof = mr - (lr & keep_legacy)
    out = Profile(source=f"{legacy.source}+{mp.source}", path=str(path))
    for name in ("ranks", "steps", "ops", "comm_ops", "comm_bandwidth", "links"):
        parts = []
        for p, keep in ((legacy, keep_legacy), (mp, keep_msprof)):
            df = getattr(p, name)
            if df is None or not len(df):
                continue
            sel = df["rank"].isin(keep) if "rank" in df.columns else pd.Series(True, index=df.index)
            if name == "links" and "rank" not in df.columns:
                sel = pd.Series(bool(keep), index=df.index)
            parts.append(df[sel])
        frames = [f for f in parts if len(f)]
        if frames:
            setattr(out, name, pd.concat(frames, ignore_index=True))
    refs = []
    for p, keep in ((legacy, keep_legacy), (mp, keep_msprof)):
        ref = p.reference_breakdown
        if ref is not None and len(ref):
            refs.append(ref[ref["rank"].isin(keep)])
    refs = [r for r in refs if len(r)]
    out.reference_breakdown = pd.concat(refs, ignore_index=True) if refs else None
    out.meta = {
        **legacy.meta,
        "formats": [legacy.source, mp.source],
        "msprof": mp.meta,
        "rank_source": {**{str(r): legacy.source for r in keep_legacy}, **{str(r): mp.source for r in keep_msprof}},
    }
    for k in ("producer", "npu"):
        if k in mp.meta:
            out.meta[k] = mp.meta[k]
    out.warnings = warnings
    return out
