"""Rule `memory_fragmentation`: the allocator reserved far more than was ever allocated (memory table:
`peak_reserved_bytes` - `peak_allocated_bytes`): held but unused memory. No gain: memory, not time."""

from __future__ import annotations

from analyzers.analyses.advice.rule import Rule
from analyzers.analyses.memory import _num

ID = "memory_fragmentation"

#: reserved - allocated above this share of reserved, and above FRAGMENTATION_MIN_BYTES: fragmentation
FRAGMENTATION_SHARE = 0.3
FRAGMENTATION_MIN_BYTES = 256 << 20


def find(tables, summary):
    mem = tables.get("memory")
    if mem is None or not len(mem):
        return []
    rows = []
    for r in mem.to_dict("records"):
        rank = int(r["rank"])
        alloc, res = _num(r.get("peak_allocated_bytes")), _num(r.get("peak_reserved_bytes"))
        if alloc is None or not res or res - alloc <= max(FRAGMENTATION_SHARE * res, FRAGMENTATION_MIN_BYTES):
            continue
        rows.append(
            {
                "key": str(rank),
                "severity": "medium",
                "message": (
                    f"rank {rank}: the allocator reserved {res / 2**30:.2f} GiB but at most "
                    f"{alloc / 2**30:.2f} GiB was allocated ({(res - alloc) / 2**30:.2f} GiB, "
                    f"{(res - alloc) / res:.0%} of reserved, held but unused): fragmentation or a pool sized larger "
                    "than needed; the headroom is smaller than the allocations say"
                ),
                "evidence": (
                    f"memory[rank={rank}]: peak_reserved_bytes {res:.0f} - peak_allocated_bytes {alloc:.0f} = "
                    f"{res - alloc:.0f} > {FRAGMENTATION_SHARE:.0%} of reserved"
                ),
                "ranks": [rank],
                "stage": None,
                "basis": "reserved minus allocated at their peaks (the profiler's own numbers)",
            }
        )
    return rows


RULE = Rule(
    id=ID,
    find=find,
    needs=("memory",),
    thresholds={"FRAGMENTATION_SHARE": FRAGMENTATION_SHARE, "FRAGMENTATION_MIN_BYTES": FRAGMENTATION_MIN_BYTES},
    fires=(
        "`peak_reserved_bytes` − `peak_allocated_bytes` above `FRAGMENTATION_SHARE` of reserved and above "
        "`FRAGMENTATION_MIN_BYTES`: held but unused memory; evidence: reserved, allocated"
    ),
    gain="null: memory, not time",
)
