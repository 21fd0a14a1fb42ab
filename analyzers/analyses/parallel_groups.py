"""Pipeline stages of ranks, global ranks on communication-matrix links, and the traffic classes of collectives,
from the parallel groups the parsers decoded into `Profile.meta["parallel_groups"]` (analyzers/groups.py: the
structure and its readers).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Output
from analyzers.groups import PP_SIZE, group_ranks, kind_of
from analyzers.schema import bandwidth_gbps


# ---- pipeline stage of each rank ---------------------------------------------------------------


def _kind(name, entry) -> str | None:
    return entry.get("kind") if isinstance(entry, dict) else kind_of(name)


def stage_of_rank(profile, ranks: list[int] | None = None) -> tuple[dict[int, int], str | None]:
    """({global rank: pipeline stage}, source) from, in order: the parser's `ranks.stage` (legacy
    pipeline files, strategy stageId), "stage" groups (strategy stageDevices), pp groups (the i-th
    lowest global rank of a pp group runs stage i), Megatron `distributed_args` (stage = rank //
    (world / pp), as msprof-analyze's map_rank_pp_stage), the profiler's stage count (MindSpore's
    contiguous layout). `ranks`: the ranks to place when the profile's rank table is empty. ({}, None)
    when unknown."""
    ranks_df = getattr(profile, "ranks", None)
    meta = getattr(profile, "meta", None) or {}
    if ranks_df is not None and len(ranks_df):
        ranks = [int(r) for r in ranks_df["rank"]]
    else:
        ranks = sorted({int(r) for r in ranks or []})
    if ranks_df is not None and len(ranks_df) and "stage" in ranks_df.columns and ranks_df["stage"].notna().any():
        return {int(r): int(s) for r, s in zip(ranks_df["rank"], ranks_df["stage"]) if pd.notna(s)}, "profiler files"
    if meta.get("stage_of_rank"):
        return {int(k): int(v) for k, v in meta["stage_of_rank"].items()}, "profiler files"
    groups = meta.get("parallel_groups") or {}
    out: dict[int, int] = {}
    for e in groups.values():
        if isinstance(e, dict) and e.get("kind") == "stage" and e.get("stage") is not None:
            for r in group_ranks(e):
                out.setdefault(r, int(e["stage"]))
    if out:
        return out, "parallel strategy"
    for name, e in groups.items():
        if _kind(name, e) == "pp":
            for i, r in enumerate(group_ranks(e)):
                out.setdefault(r, i)
    if out:
        return out, "pp groups"
    dist = _distributed_args(meta)
    world = dist.get("world_size") or meta.get("world_size") or _world(ranks_df) or (max(ranks) + 1 if ranks else None)
    pp = dist.get(PP_SIZE)
    src = "distributed_args"
    if not pp:
        pp, src = meta.get("stage_num"), "stage count"
    try:
        pp, world = int(pp), int(world)
    except (TypeError, ValueError):
        return {}, None
    if pp > 1 and world % pp == 0:
        per = world // pp
        return {r: r // per for r in ranks}, src
    return {}, None


def _distributed_args(meta: dict) -> dict:
    d = meta.get("distributed_args")
    if isinstance(d, dict) and d:
        return d
    for m in (meta.get("rank_meta") or {}).values():
        d = (m or {}).get("distributed_args")
        if isinstance(d, dict) and d:
            return d
    return {}


def _world(ranks_df) -> int | None:
    if ranks_df is None or not len(ranks_df) or "world_size" not in ranks_df.columns:
        return None
    ws = pd.to_numeric(ranks_df["world_size"], errors="coerce").dropna()
    return int(ws.max()) if len(ws) else None


def rank_stages(profile, workload_meta: dict | None = None) -> pd.DataFrame:
    """Table `rank_stages`: rank, stage (null when unknown), stage_source. Where the profile does not say (a
    perfbench run's CPU profile records no layout), the stage each rank's own meta names (`stage`, written by the
    workloads' pipeline trainer) is used, source "workload"."""
    stage_of, src = stage_of_rank(profile)
    if not stage_of and workload_meta:
        stage_of = {
            int(r): int(m["stage"])
            for r, m in workload_meta.items()
            if isinstance(m, dict) and m.get("stage") is not None and int(m.get("pipeline_stages") or 1) > 1
        }
        src = "workload" if stage_of else None
    ranks = sorted(int(r) for r in profile.ranks["rank"]) if len(profile.ranks) else sorted(stage_of)
    return pd.DataFrame(
        {
            "rank": pd.Series(ranks, dtype="int64"),
            "stage": pd.array([stage_of.get(r) for r in ranks], dtype="Int64"),
            "stage_source": [src if r in stage_of else None for r in ranks],
        }
    )


# ---- global ranks on links ---------------------------------------------------------------------


def local_to_global(links: pd.DataFrame, groups: dict) -> dict[str, dict[int, int]]:
    """{group: {local rank: global rank}} as msprof-analyze's comm_matrix_analysis builds it: the
    group's sorted global ranks (parallel group info) where known, else each reporting rank's own
    link `i-i` (local i is that rank)."""
    out: dict[str, dict[int, int]] = {}
    for name, e in (groups or {}).items():
        rs = group_ranks(e)
        if rs:
            out[str(name)] = dict(enumerate(rs))
    if links is None or not len(links) or "rank" not in links.columns:
        return out
    known = set(out)
    self_links = links[(links["src"] == links["dst"]) & links["rank"].notna()]
    self_links = self_links[~self_links["group"].astype(str).isin(known)]
    if len(self_links):
        owners = self_links.groupby([self_links["group"].astype(str), "src"])["rank"].agg(["nunique", "first"])
        for (g, local), n, o in zip(owners.index, owners["nunique"], owners["first"]):
            if n == 1:
                out.setdefault(g, {})[int(local)] = int(o)
    return {g: m for g, m in out.items() if m}


def global_links(links: pd.DataFrame | None, groups: dict) -> pd.DataFrame | None:
    """`links` with src/dst as global ranks (`src_local`/`dst_local` keep the group-local numbers the
    profiler wrote); an end that cannot be mapped is null. Groups with no mapping at all (e.g. the
    legacy MindSpore files, whose links name ranks within an unnamed group) keep their numbers and
    `global_ranks` False."""
    if links is None or not len(links):
        return links
    df = links.copy()
    maps = local_to_global(df, groups)
    g = df["group"].astype(str)
    # rows a reader already wrote in global ranks (msprof-analyze's cluster matrix) stay as they are
    done = (
        df["global_ranks"].fillna(False).astype(bool)
        if "global_ranks" in df.columns
        else pd.Series(False, index=df.index)
    )
    g = g.where(~done, "\0already global")
    src_l = pd.to_numeric(df["src"], errors="coerce")
    dst_l = pd.to_numeric(df["dst"], errors="coerce")
    mapped = g.isin(list(maps))
    table = pd.DataFrame(
        [(gg, float(lo), gl) for gg, m in maps.items() for lo, gl in m.items()], columns=["group", "local", "global"]
    ).astype({"group": object})
    keys = pd.MultiIndex.from_frame(table[["group", "local"]]) if len(table) else None

    def to_global(local: pd.Series) -> pd.Series:
        """The group's global rank where the group has a mapping (null for a local rank it lacks), else as is."""
        if keys is None:
            return local
        pos = keys.get_indexer(pd.MultiIndex.from_arrays([g.astype(object).to_numpy(), local.to_numpy()]))
        got = np.where(pos >= 0, table["global"].to_numpy(dtype=float)[pos], np.nan)
        return pd.Series(np.where(mapped.to_numpy(), got, local.to_numpy()), index=local.index)

    df["src_local"] = src_l.where(~done).astype("Int64")  # unknown where the reader wrote global ranks
    df["dst_local"] = dst_l.where(~done).astype("Int64")
    df["src"] = to_global(src_l).astype("Int64")
    df["dst"] = to_global(dst_l).astype("Int64")
    df["global_ranks"] = (mapped | done).to_numpy()
    return df


#: msprof-analyze adds only these ops into "Total Op Info" (BaseAnalysis.check_add_op: top/middle/bottom
#: statistic rows are left out, the per-op-type "total" rows and plain ops are summed)
_STAT_WORDS = ("middle", "top", "bottom")


def link_totals(links: pd.DataFrame | None) -> pd.DataFrame | None:
    """Per step, group and global src->dst link: msprof-analyze's "Total Op Info" (cluster_communication_matrix.json):
    sum of transit size and time over the group's ops (statistic rows top/middle/bottom left out),
    bandwidth = size / time (GB/s = MB/ms). Links whose ends are not known as global ranks are left out."""
    if links is None or not len(links) or "src" not in links.columns:
        return None
    df = links.dropna(subset=["src", "dst"])
    names = df["op_name"].astype(str).str.lower()
    keep = ~names.str.contains("|".join(_STAT_WORDS), regex=True)
    df = df[keep & (names != "total op info")]
    if df.empty:
        return None
    step = df["step"] if "step" in df.columns else pd.Series(pd.NA, index=df.index)
    df = df.assign(
        step=pd.to_numeric(step, errors="coerce").fillna(-1).astype(int),
        group=df["group"].astype(str),
        src=df["src"].astype(int),
        dst=df["dst"].astype(int),
        size_mb=pd.to_numeric(df["size_mb"], errors="coerce").fillna(0.0),
        time_ms=pd.to_numeric(df["time_ms"], errors="coerce").fillna(0.0),
    )
    out = df.groupby(["step", "group", "src", "dst"], as_index=False).agg(
        transport=("transport", "last"), size_mb=("size_mb", "sum"), time_ms=("time_ms", "sum"), ops=("op_name", "size")
    )
    out["bandwidth_gbps"] = bandwidth_gbps(out["size_mb"], out["time_ms"])
    out["step"] = out["step"].where(out["step"] >= 0).astype("Int64")
    out.insert(1, "op_name", "Total Op Info")
    return out


# ---- registry entry ----------------------------------------------------------------------------


def analysis(ctx):
    """Registry entry `parallel_groups`: rank_stages, links with global ranks (as parsed where no group maps
    them), link_totals, and the per-transport comm_bandwidth as parsed (the one writer of links and
    comm_bandwidth)."""
    p = ctx.profile
    groups = (p.meta or {}).get("parallel_groups") or {} if p is not None else {}
    links = global_links(ctx.table("links"), groups)
    return Output(
        tables={
            "rank_stages": rank_stages(p, ctx.meta) if p is not None else None,
            "link_totals": link_totals(links),
            "links": links,
            "comm_bandwidth": ctx.table("comm_bandwidth"),
        }
    )


# ---- traffic classes of collectives ------------------------------------------------------------

#: what a collective is for: data-parallel gradient reduction, tensor-parallel activations (Megatron's f / g),
#: pipeline point-to-point transfers, expert (MoE) dispatch / combine
COMM_CLASSES = ("dp_grad", "tensor_parallel", "pipeline_p2p", "expert_dispatch")
#: a group's kind -> the class of the traffic in it (cp / stage groups: no class)
KIND_CLASS = {"dp": "dp_grad", "tp": "tensor_parallel", "pp": "pipeline_p2p", "ep": "expert_dispatch"}
#: the workload's host spans (workloads/parallel/pipeline.py) whose collectives have one class
SPAN_CLASS = {"allreduce": "dp_grad", "send": "pipeline_p2p", "recv": "pipeline_p2p"}


def classify_comm_ops(
    comm_ops: pd.DataFrame | None,
    groups: dict | None = None,
    spans: pd.DataFrame | None = None,
    size_classes: dict | None = None,
) -> pd.Series:
    """The traffic class of every collective (`COMM_CLASSES`, None when nothing says), first rule that applies:

    1. point-to-point op types (send, recv, batchSendRecv) -> pipeline_p2p;
    2. the op's group is a known group with a kind (profiler_metadata / db META_DATA / communication_group
       labels, or the groups a perfbench workload names, `rules.layout_groups`): tp -> tensor_parallel,
       ep -> expert_dispatch, pp -> pipeline_p2p, dp -> dp_grad, except an all-to-all in a dp group, which
       is expert dispatch (MoE layouts whose experts are sharded over the data-parallel ranks);
    3. its start lies in a workload host span of one class (`SPAN_CLASS`: the gradient all-reduce span,
       the pipeline send / recv spans);
    4. its payload size is one the workload declared for a class (`comm_size_classes` in the run's meta:
       {bytes: class}, for the collectives inside the stage's compute on CPU profiles, which record no
       group; a size two classes share is not declared).
    """
    if comm_ops is None or not len(comm_ops):
        return pd.Series([], dtype=object)
    out = pd.Series([None] * len(comm_ops), index=comm_ops.index, dtype=object)
    # op_type is a schema column of comm_ops (analyzers/schema.py): every parser fills it from the op name
    types = (
        comm_ops["op_type"].astype(str).str.lower()
        if "op_type" in comm_ops.columns
        else pd.Series([""] * len(comm_ops), index=comm_ops.index)
    )
    out[types.isin(["send", "recv"]).to_numpy()] = "pipeline_p2p"
    groups = groups or {}
    if groups and "group" in comm_ops.columns:
        for i, (g, t) in enumerate(zip(comm_ops["group"], types)):
            if out.iat[i] is not None:
                continue
            e = groups.get(str(g))
            kind = _kind(g, e) if e is not None else None
            if kind == "dp" and t in ("alltoall", "alltoallv"):
                out.iat[i] = "expert_dispatch"
            elif kind in KIND_CLASS:
                out.iat[i] = KIND_CLASS[kind]
    if (
        spans is not None
        and len(spans)
        and {"rank", "kind", "start_ts", "end_ts"} <= set(spans.columns)
        and "start_us" in comm_ops.columns
    ):
        sp = spans[spans["kind"].isin(list(SPAN_CLASS))]
        by_rank = {int(r): g for r, g in sp.groupby("rank")}
        for i, (r, st) in enumerate(zip(comm_ops["rank"], pd.to_numeric(comm_ops["start_us"], errors="coerce"))):
            if out.iat[i] is not None or pd.isna(st) or int(r) not in by_rank:
                continue
            g = by_rank[int(r)]
            hit = g[(g["start_ts"] * 1e6 <= st) & (st <= g["end_ts"] * 1e6)]
            if len(hit):
                out.iat[i] = SPAN_CLASS[str(hit["kind"].iloc[0])]
    if size_classes and "size_bytes" in comm_ops.columns:
        sc = {float(k): v for k, v in size_classes.items() if v in COMM_CLASSES}
        size = pd.to_numeric(comm_ops["size_bytes"], errors="coerce")
        for i, s in enumerate(size):
            if out.iat[i] is None and pd.notna(s) and float(s) in sc:
                out.iat[i] = sc[float(s)]
    return out


def comm_class_totals(comm_ops: pd.DataFrame | None) -> pd.DataFrame | None:
    """Table `comm_classes`: per rank, step and traffic class (null: unclassified), the collectives' count,
    summed time and bytes."""
    if comm_ops is None or not len(comm_ops) or "comm_class" not in comm_ops.columns:
        return None
    co = comm_ops.assign(comm_class=comm_ops["comm_class"].astype(object).where(comm_ops["comm_class"].notna(), None))
    co = co.assign(_cls=co["comm_class"].fillna("(unclassified)"))
    t = (
        co.groupby(["rank", "step", "_cls"], dropna=False)
        .agg(
            ops=("op_name", "size"),
            elapse_ms=("elapse_ms", "sum"),
            size_bytes=("size_bytes", lambda s: s.sum(min_count=1)),
        )
        .reset_index()
    )
    t["comm_class"] = pd.Series([None if c == "(unclassified)" else c for c in t["_cls"]], index=t.index, dtype=object)
    return t[["rank", "step", "comm_class", "ops", "elapse_ms", "size_bytes"]]
