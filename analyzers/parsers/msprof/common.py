"""Small helpers shared by the msprof and legacy parsers (no format knowledge here)."""

from __future__ import annotations

import re

import pandas as pd

from analyzers.schema import bandwidth_gbps, conform, empty


#: op-type spellings -> schema op_type (schema.COMM_OP_TYPES)
_COMM_TYPES = [
    ("reducescatter", "reducescatter"),
    ("reduce_scatter", "reducescatter"),
    ("allreduce", "allreduce"),
    ("all_reduce", "allreduce"),
    ("allgather", "allgather"),
    ("all_gather", "allgather"),
    ("alltoallv", "alltoallv"),
    ("alltoall", "alltoall"),
    ("all_to_all", "alltoall"),
    ("broadcast", "broadcast"),
    ("receive", "recv"),
    ("recv", "recv"),
    ("send", "send"),
    ("barrier", "barrier"),
    ("reduce", "reduce"),
    ("gather", "gather"),
    ("scatter", "scatter"),
]


def comm_op_type(name: str) -> str | None:
    """Collective type from an op/type name ('stream_41_0_AllReduce-op4582', 'hcom_allReduce__1',
    'Default/AllReduce-op534_0', 'HcomAllReduce'), or None if it is not a communication op."""
    if not isinstance(name, str):
        return None
    base = name.split("/")[-1]
    low = re.sub(r"-op\d+.*$", "", base).lower()
    if low.startswith("stream_"):
        # legacy step-trace column: stream_<id>_<idx>_<Name>
        low = low.split("_", 3)[-1] if low.count("_") >= 3 else low
    if "parallel" in low and low.startswith("stream"):
        return None
    strong = (
        "reducescatter",
        "reduce_scatter",
        "allreduce",
        "all_reduce",
        "allgather",
        "all_gather",
        "alltoallv",
        "alltoall",
        "all_to_all",
        "broadcast",
        "receive",
    )
    hcom = low.startswith(("hcom", "hccl", "lccl", "mccl"))
    for key, typ in _COMM_TYPES:
        if key in strong:
            if key in low:
                return typ
        elif low == key or (hcom and key in low):
            # weak keys (send, recv, reduce, gather, scatter, barrier) also name compute ops
            # (ReduceSum, GatherV2): only an exact name or an hcom/hccl-prefixed one counts
            return typ
    return None


def op_type_from_name(name: str) -> str:
    """'Default/network/Conv2D-op12' -> 'Conv2D'."""
    base = str(name).split("/")[-1]
    return re.sub(r"-op\d+.*$", "", base)


def rank_from_name(name: str, pattern: str) -> int | None:
    m = re.search(pattern, name)
    return int(m.group(1)) if m else None


#: transports that stay on one device: copies there are not part of a collective's payload
ON_DEVICE = {"LOCAL", "ON_CHIP"}


def link_rows(entries) -> tuple[list[dict], dict[str, list[float]], float, int | None]:
    """Per-link facts of one collective on one rank, the way HCCL reports them.

    `entries`: (src, dst, transport, size_mb, time_ms) per data task or link (a copy with src == dst or
    an ON_CHIP / LOCAL transport stays on the device). Returns
    (links: one dict per (src, dst, transport) with summed size_mb/time_ms,
     per_transport: {transport: [size_mb, time_ms]} with on-device copies under "LOCAL",
     payload_mb: bytes that crossed a link to another rank (on-device copies excluded, as msprof does),
     group_size: ranks seen at either end of the links (None without links; a lower bound when the
     group's other members never exchange data with this rank))."""
    per_link: dict[tuple, list[float]] = {}
    for src, dst, tr, mb, ms in entries:
        acc = per_link.setdefault((int(src), int(dst), str(tr).upper()), [0.0, 0.0])
        acc[0] += float(mb)
        acc[1] += float(ms)
    links, per_tr, payload, ranks = [], {}, 0.0, set()
    for (src, dst, tr), (mb, ms) in per_link.items():
        links.append({"src": src, "dst": dst, "transport": tr, "size_mb": mb, "time_ms": ms})
        local = src == dst or tr in ON_DEVICE
        key = "LOCAL" if local else tr
        a = per_tr.setdefault(key, [0.0, 0.0])
        a[0] += mb
        a[1] += ms
        ranks.update((src, dst))
        if not local:
            payload += mb
    return links, per_tr, payload, (len(ranks) if ranks else None)


def rate_table(rows: list[dict], table: dict) -> pd.DataFrame:
    """The links or comm_bandwidth table (`table`: its schema) of rows holding size_mb and time_ms, with their
    bandwidth_gbps; the empty table when there are no rows."""
    if not rows:
        return empty(table)
    df = pd.DataFrame(rows)
    df["bandwidth_gbps"] = bandwidth_gbps(df["size_mb"], df["time_ms"])
    return conform(df, table)
