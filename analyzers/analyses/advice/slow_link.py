"""Rule `slow_link`: a link (or a rank's transport) far slower than its group's mean (slow_links). Its gain is the
link's time above the same bytes at the group mean bandwidth, per step."""

from __future__ import annotations

from analyzers.analyses.advice.common import excess_ms_per_step, fmt, n_steps, table
from analyzers.analyses.advice.rule import Rule

ID = "slow_link"

#: a slow link below this share of its group's mean bandwidth is high severity
SLOW_LINK_HIGH = 0.3


def find(tables, summary):
    sl = table(tables, "slow_links", "slow")
    if sl is None:
        return []
    out = []
    for _, r in sl[sl["slow"].astype(bool)].iterrows():
        where = f"link {r['src']}->{r['dst']}" if r["kind"] == "link" else f"rank {r['src']}"
        steps = n_steps(tables)
        gain = excess_ms_per_step(r["time_ms"], r["size_mb"], r["group_mean_gbps"], steps)
        out.append(
            {
                "key": f"{r['kind']}:{r['group']}:{r['transport']}:{r['src']}-{r['dst']}",
                "gain_ms": gain,
                "explains": "exposed",
                "basis": (
                    f"the link's time minus the same bytes at the group mean bandwidth: ({fmt(r['time_ms'])} - "
                    f"{fmt(r['size_mb'])} MB / {fmt(r['group_mean_gbps'])} GB/s) ms / {steps} steps"
                    if gain is not None
                    else "not estimated: steps or the group mean bandwidth unknown"
                ),
                "ranks": sorted({int(r["src"]), int(r["dst"])}),
                "severity": "high" if r["ratio"] < SLOW_LINK_HIGH else "medium",
                "message": (
                    f"{r['transport']} {where} reaches {fmt(r['bandwidth_gbps'])} GB/s, "
                    f"{r['ratio']:.0%} of the group average {fmt(r['group_mean_gbps'])} GB/s: check that link/NIC."
                ),
                "evidence": (
                    f"slow_links[kind={r['kind']}, group={r['group']}, transport={r['transport']}, "
                    f"src={r['src']}, dst={r['dst']}]: {fmt(r['size_mb'])} MB in {fmt(r['time_ms'])} ms"
                ),
            }
        )
    return out


RULE = Rule(
    id=ID,
    find=find,
    needs=("slow_links", "comm_ops"),
    thresholds={"SLOW_LINK_HIGH": SLOW_LINK_HIGH},
    fires=("a slow `slow_links` row (high below `SLOW_LINK_HIGH` of the group mean); evidence: size, time, group mean"),
    gain="(link time − the same bytes at the group mean bandwidth) / steps",
)
