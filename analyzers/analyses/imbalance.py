"""Cross-rank imbalance of the step breakdown within each parallel group (msprof-analyze's "slow rank"
advisor, per group).

msprof-analyze (advisor/analyzer/cluster/slow_rank_analyzer.py, SlowRankAnalyzer) flags a dimension
d in {Computing, Communication(Not Overlapped), Free} when

    (max over ranks of d - min over ranks of d) / mean over ranks of (Computing + Communication(Not
    Overlapped) + Free)  >  RATIO_THRESHOLD = 0.05

and reports the spread max - min. msprof-analyze compares all (step, rank) rows of the cluster at once;
here a rank's value is its mean over steps, and the comparison is made inside each group whose ranks
should do the same work: the data-parallel / tensor / expert groups of the profiler metadata, the
ranks of one pipeline stage, or - when no stage is known - all ranks ("all"). Comparing ranks of
different stages would flag the pipeline layout itself (see analyzers.analyses.stages for that).

Table `rank_imbalance`, one row per group and dimension: group, kind, ranks, dimension, max_rank,
max_ms, min_rank, min_ms, spread_ms, mean_total_ms, ratio, flagged. Ranks marked inconsistent are
left out (`excluded_ranks`). A dimension the profiler did not write (e.g. Free in MindSpore's legacy
cluster files) is not compared, and the denominator is then the mean step time.
"""

from __future__ import annotations

import pandas as pd

from analyzers.context import Output
from analyzers.groups import group_ranks
from analyzers.analyses.stages import trusted_ranks

#: msprof-analyze SlowRankAnalyzer.RATIO_THRESHOLD: spread / mean step total above this is flagged
RATIO_THRESHOLD = 0.05
#: dimensions compared (msprof-analyze BOTTLENECK_LIST: Computing, Communication, Free)
DIMENSIONS = {"computing": "computing_us", "communication": "communication_not_overlapped_us", "free": "free_us"}
#: group kinds whose ranks do different work by design (a pp group spans the stages)
SKIP_KINDS = ("pp",)

IMBALANCE_COLUMNS = [
    "group",
    "kind",
    "ranks",
    "dimension",
    "max_rank",
    "max_ms",
    "min_rank",
    "min_ms",
    "spread_ms",
    "mean_total_ms",
    "ratio",
    "flagged",
    "excluded_ranks",
]


def comparison_groups(
    ranks: list[int], groups: dict, rank_stages: pd.DataFrame | None
) -> list[tuple[str, str, list[int]]]:
    """(name, kind, profiled ranks) of every group with at least two profiled ranks to compare."""
    have = set(ranks)
    out, seen = [], set()
    stage_of = {}
    if rank_stages is not None and len(rank_stages):
        stage_of = {int(r): int(s) for r, s in zip(rank_stages["rank"], rank_stages["stage"]) if pd.notna(s)}
    staged = len(set(stage_of.values())) >= 2
    if staged:
        for s in sorted(set(stage_of.values())):
            members = sorted(r for r, st in stage_of.items() if st == s and r in have)
            out.append((f"stage {s}", "stage", members))
            seen.add(tuple(members))
    for name, e in (groups or {}).items():
        kind = e.get("kind") if isinstance(e, dict) else None
        if kind in SKIP_KINDS or kind == "stage":
            continue
        members = [r for r in group_ranks(e) if r in have]
        if tuple(members) in seen:
            continue
        label = (e.get("label") if isinstance(e, dict) else None) or name
        out.append((str(label), kind, members))
        seen.add(tuple(members))
    if not staged and tuple(sorted(have)) not in seen:
        out.append(("all", None, sorted(have)))
    return [g for g in out if len(g[2]) >= 2]


def rank_imbalance(
    sb: pd.DataFrame | None, groups: dict | None, rank_stages: pd.DataFrame | None
) -> pd.DataFrame | None:
    """The `rank_imbalance` table (see the module docstring)."""
    if sb is None or not len(sb):
        return None
    good, bad = trusted_ranks(sb)
    cols = [
        c for c in DIMENSIONS.values() if c in good.columns and pd.to_numeric(good[c], errors="coerce").notna().any()
    ]
    if not cols:
        return None
    good = good.assign(rank=good["rank"].astype(int))
    per = good.groupby("rank")[cols + (["step_us"] if "step_us" in good.columns else [])].mean()
    per = per.dropna(subset=cols)
    if len(per) < 2:
        return None
    # msprof-analyze's denominator: computing + communication(not overlapped) + free; the step time when a part is
    # unknown
    total = per[cols].sum(axis=1) if len(cols) == len(DIMENSIONS) else per.get("step_us")
    if total is None:
        return None
    rows = []
    for name, kind, members in comparison_groups(list(per.index), groups or {}, rank_stages):
        g = per.loc[members]
        mean_total = float(total.loc[members].mean())
        for dim, col in DIMENSIONS.items():
            if col not in cols:
                continue
            v = g[col]
            spread = float(v.max() - v.min())
            ratio = spread / mean_total if mean_total > 0 else float("nan")
            rows.append(
                {
                    "group": name,
                    "kind": kind,
                    "ranks": ",".join(map(str, members)),
                    "dimension": dim,
                    "max_rank": int(v.idxmax()),
                    "max_ms": float(v.max()) / 1000.0,
                    "min_rank": int(v.idxmin()),
                    "min_ms": float(v.min()) / 1000.0,
                    "spread_ms": spread / 1000.0,
                    "mean_total_ms": mean_total / 1000.0,
                    "ratio": ratio,
                    "flagged": bool(ratio > RATIO_THRESHOLD),
                    "excluded_ranks": ",".join(map(str, bad)),
                }
            )
    if not rows:
        return None
    return pd.DataFrame(rows, columns=IMBALANCE_COLUMNS)


def analysis(ctx):
    """Registry entry `rank_imbalance`."""
    p = ctx.profile
    groups = (p.meta or {}).get("parallel_groups") if p is not None else None
    return Output(
        tables={"rank_imbalance": rank_imbalance(ctx.table("step_breakdown"), groups, ctx.table("rank_stages"))}
    )
