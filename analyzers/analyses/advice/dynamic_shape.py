"""Rule `dynamic_shape`: every operator with a known OP State is dynamic on a rank (msprof-analyze
DynamicShapeChecker). No gain: the profile does not say what static shapes would cost."""

from __future__ import annotations

from analyzers.analyses.advice.common import table
from analyzers.analyses.advice.rule import Rule

ID = "dynamic_shape"


def find(tables, summary):
    k = table(tables, "ops_for_checks", "OP State")
    if k is None:
        return []
    out = []
    for rank, g in k.groupby("rank"):
        st = g["OP State"].dropna().astype(str).str.lower()
        st = st[st.isin(["dynamic", "static"])]
        if len(st) and (st == "dynamic").all():
            out.append(int(rank))
    if not out:
        return []
    n = int(k["OP State"].astype(str).str.lower().eq("dynamic").sum())
    return [
        {
            "basis": "not estimated: the profile does not say what static shapes would cost",
            "severity": "medium",
            "ranks": out,
            "stage": None,
            "message": (
                f"All operators are compiled for dynamic shapes on ranks {', '.join(map(str, out))}: each launch "
                f"pays shape inference and kernel selection. For static shapes disable JIT compile "
                f"(torch_npu.npu.set_compile_mode(jit_compile=False)) or pad inputs to fixed buckets."
            ),
            "evidence": f"ops['OP State']: {n} ops 'dynamic', 0 'static' on ranks {', '.join(map(str, out))}",
        }
    ]


RULE = Rule(
    id=ID,
    find=find,
    needs=("ops_for_checks",),
    fires=(
        "every kernel with a known `OP State` is `dynamic` on a rank (msprof-analyze `DynamicShapeChecker`); "
        "evidence: counts of dynamic / static"
    ),
    gain="null: the profile does not say what static shapes would cost (basis says why)",
)
