"""What checkpointing costs in step time (train.checkpoint_every; workloads.runner.Checkpoints).

The runner saves a checkpoint at the end of every N-th step, inside that step's time, and records the
save's own duration as `checkpoint_s` in the step record. Per step the run's step time is the slowest
rank's (as for step_time_s); over the measured steps (step >= warm-up):

    checkpoint_cost   = median(step time of steps with a save) / median(step time of steps without) - 1
    checkpoint_save_s = median over saves of the slowest rank's checkpoint_s

Both are unknown (not reported) when the run saved no checkpoint in its measured steps, or has no
measured step without one.
"""

from __future__ import annotations

from analyzers.context import Output


def analysis(ctx) -> Output:
    ws = ctx.workload_steps
    if ws is None or "checkpoint_s" not in ws.columns:
        return Output()
    steady = ws[ws["step"] >= ctx.warmup_steps()]
    per = steady.groupby("step").agg(t=("step_time_s", "max"), save=("checkpoint_s", "max"))
    saved, plain = per[per["save"].notna()], per[per["save"].isna()]
    if saved.empty or plain.empty or plain["t"].median() <= 0:
        return Output()
    return Output(
        metrics={
            "checkpoint_cost": float(saved["t"].median() / plain["t"].median() - 1.0),
            "checkpoint_save_s": float(saved["save"].median()),
        }
    )
