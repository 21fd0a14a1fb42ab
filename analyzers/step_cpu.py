"""CPU time per step: a speed measure that a busy machine stretches far less than wall-clock step time.

The runner records, per rank and step, `cpu_s`: time.process_time() of the rank's process (all its
threads) from the step's start to its end. Waiting for a CPU that a neighbour holds costs wall time but no
CPU time, so on a shared machine this separates "our code got slower" from "the machine got busier"
better than step_time_s (threads that spin while waiting still count, so it is not load-free).

    step_cpu_s = median over measured steps of (max over ranks of cpu_s)
"""

from __future__ import annotations

from analyzers.registry import Output


def analysis(ctx) -> Output:
    ws = ctx.workload_steps
    if ws is None or "cpu_s" not in ws.columns:
        return Output()
    steady = ws[(ws["step"] >= ctx.warmup_steps()) & ws["cpu_s"].notna()]
    if steady.empty:
        return Output()
    return Output(metrics={"step_cpu_s": float(steady.groupby("step")["cpu_s"].max().median())})
