"""Overlapped gradient all-reduce (parallel.overlap_grad_comm; workloads/parallel/overlap.py), from the workload's
spans.

The MindSpore CPU profiler records no op for `mint.distributed` collectives, so an overlapped run's profile
cannot split its communication; the workload times it on the host instead. Per rank and step after warm-up:

    grad_comm_wait_s       = duration of the `allreduce_wait` span: after backward returned, until the last
                             asynchronous all-reduce completed (the communication backward did not hide, plus
                             any of backward's queued kernels still running: an upper bound)
    grad_buckets_early     = buckets whose `allreduce` span started before the step's `backward` span ended
                             / buckets of the step (1.0: every bucket was issued during backward)

Run values: mean over ranks per step, median over steps. Unknown (not reported) without such spans.
"""

from __future__ import annotations

import pandas as pd

from analyzers.context import Output


def analysis(ctx) -> Output:
    sp = ctx.spans
    if sp is None or sp.empty or "kind" not in sp.columns or not (sp["kind"] == "allreduce_wait").any():
        return Output()
    sp = sp[sp["step"] >= ctx.warmup_steps()]
    waits, early = [], []
    for (step, rank), g in sp.groupby(["step", "rank"]):
        w, b, a = (g[g["kind"] == k] for k in ("allreduce_wait", "backward", "allreduce"))
        if len(w) != 1 or len(b) != 1 or a.empty:
            continue
        waits.append((step, float(w["end_ts"].iloc[0] - w["start_ts"].iloc[0])))
        early.append((step, float((a["start_ts"] < b["end_ts"].iloc[0]).mean())))
    if not waits:
        return Output()

    def run_value(pairs):
        return float(pd.DataFrame(pairs, columns=["step", "v"]).groupby("step")["v"].mean().median())

    return Output(metrics={"grad_comm_wait_s": run_value(waits), "grad_buckets_early": run_value(early)})
