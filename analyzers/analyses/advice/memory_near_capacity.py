"""Rule `memory_near_capacity`: a rank's peak memory near its device's capacity, with the cheapest knob that fits.

Inputs: the `memory` table (analyzers/analyses/memory.py: per rank `peak_bytes`, `capacity_bytes`, `params`,
`baseline_bytes`), the run's `step_time_s`, `computing_s` and `communication_not_overlapped_s` from `summary`, and the
run config (`parallel`, `train`, `world_size`) for the knobs' current values. Savings come from the memory model
(perfbench/predict/memory.py: ZeRO-paper model states; recompute keeps the activations of block inputs only, taken
as RECOMPUTE_KEEPS of the activations, or the share measured for the workload (RECOMPUTE_KEEPS_BY_WORKLOAD:
ResNet-50 keeps 77%, its BatchNorm being kept), the activations being the peak minus the model states and, where
the memory table knows it, the process's baseline before the model was built: still an upper bound where the rest
of the peak holds compiled graphs and pools, as on CPU) and time costs from the step's own parts. No gain: a
memory fix buys room, not time, so the finding ranks after every finding with one; `try` is the knob and the
message carries the predicted saving and the time it costs.
"""

from __future__ import annotations

from analyzers.analyses.memory import OPTIMIZER_STATES
from analyzers.analyses.advice.rule import CONFIG_KEY, Rule
from analyzers.analyses.memory import _num

ID = "memory_near_capacity"

#: peak above this share of the capacity: near capacity
NEAR_CAPACITY = 0.9
#: a knob "fits" when the predicted peak is at most this share of the capacity
FIT_TARGET = 0.85
#: share of the activations recompute still keeps (block inputs), and the extra compute it costs: one more
#: forward pass, forward being 1/3 of forward+backward (perfbench/predict/model.py FWD_SHARE)
RECOMPUTE_KEEPS = 0.3
#: measured per workload where the block-input rule does not hold: MindSpore cannot recompute ResNet's BatchNorm
#: (its running statistics are a side effect), so a ResNet-50 sample keeps 12.7 of its 16.6 MB with recompute
#: (bench/bench_recompute_memory.py, docs/benchmarks.md "Recompute per sample")
RECOMPUTE_KEEPS_BY_WORKLOAD = {"resnet50": 12.7 / 16.6}
RECOMPUTE_TIME_SHARE = 1.0 / 3.0


def knob_options(peak: float, params: int, config: dict, summary: dict, baseline: float | None = None) -> list[dict]:
    """Each knob that frees memory from the current settings: {try, saving_bytes, time_cost_ms, how}, cheapest
    (least time) first. `baseline`: the process before the model (not activations, so recompute cannot free it)."""
    from workloads.parallel.layout_math import model_states

    par, train = config.get("parallel") or {}, config.get("train") or {}
    S = int(par.get("pipeline_stages") or 1)
    D = max(1, int(config.get("world_size") or 1) // S)
    k = OPTIMIZER_STATES.get(str(train.get("optimizer") or "momentum"), 1)
    zero = int(par.get("zero_stage") or 0)
    compute_ms = (_num(summary.get("computing_s")) or _num(summary.get("step_time_s")) or 0.0) * 1e3
    out = []
    if D > 1 and zero < 2:
        now = model_states(params, D, zero, k)["total_bytes"]
        nxt = model_states(params, D, zero + 1, k)["total_bytes"]
        # the owners' broadcast moves every parameter once per step (4P bytes): cost ~ its share of a
        # data-parallel all-reduce of the gradients (2(D-1)/D x 4P), taken from the step's exposed communication
        comm_ms = (_num(summary.get("communication_not_overlapped_s")) or 0.0) * 1e3
        cost = comm_ms * D / (2 * (D - 1)) if comm_ms else None
        out.append(
            {
                "try": {"parallel.zero_stage": zero + 1},
                "saving_bytes": now - nxt,
                "time_cost_ms": cost,
                "how": f"ZeRO stage {zero + 1}: shards {'optimizer state' if zero == 0 else 'gradients'} over {D} "
                "data-parallel ranks, adds a broadcast of the parameters each step",
            }
        )
    acts = max(0.0, peak - (baseline or 0.0) - model_states(params, D, zero, k)["total_bytes"])
    if not train.get("recompute"):
        out.append(
            {
                "try": {"train.recompute": True},
                "saving_bytes": acts
                * (1 - RECOMPUTE_KEEPS_BY_WORKLOAD.get(str(config.get("workload")), RECOMPUTE_KEEPS)),
                "time_cost_ms": compute_ms * RECOMPUTE_TIME_SHARE,
                "how": "recompute the blocks' activations in backward (one more forward)",
            }
        )
    return sorted(out, key=lambda o: (o["time_cost_ms"] is None, o["time_cost_ms"] or 0.0))


def _row(rank: int, message: str, evidence: str, basis: str, try_: dict | None) -> dict:
    return {
        "key": str(rank),
        "severity": "high",
        "message": message,
        "evidence": evidence,
        "ranks": [rank],
        "stage": None,
        "basis": basis,
        "try": try_ or None,
    }


def _near_capacity(rank: int, peak: float, cap: float, r: dict, config: dict, summary: dict) -> dict:
    params = _num(r.get("params"))
    ev = f"memory[rank={rank}]: peak_bytes {peak:.0f} / capacity_bytes {cap:.0f} = {peak / cap:.1%}"
    head = f"rank {rank}: peak memory {peak / 2**30:.2f} GiB is {peak / cap:.0%} of its {cap / 2**30:.1f} GiB"
    if not params:
        return _row(
            rank,
            head + "; the parameter count is unknown, so no knob's saving can be predicted",
            ev,
            "no parameter count in the memory table",
            None,
        )
    options = knob_options(peak, int(params), config, summary, _num(r.get("baseline_bytes")))
    fits = [o for o in options if peak - o["saving_bytes"] <= FIT_TARGET * cap]
    pick = fits[0] if fits else (max(options, key=lambda o: o["saving_bytes"]) if options else None)
    if pick is None:
        return _row(
            rank,
            head + "; zero_stage is at 2 (or one data-parallel rank) and recompute is on: fewer samples "
            "per micro-batch (parallel.micro_batches) or more ranks are left",
            ev,
            "memory model: no knob left",
            None,
        )
    cost = "unknown time cost" if pick["time_cost_ms"] is None else f"~{pick['time_cost_ms']:.0f} ms more per step"
    verdict = "fits" if pick in fits else "still does not fit; the largest saving"
    msg = (
        f"{head}: try {', '.join(f'{k}={v}' for k, v in pick['try'].items())} ({pick['how']}): predicted "
        f"saving {pick['saving_bytes'] / 2**30:.2f} GiB -> {(peak - pick['saving_bytes']) / 2**30:.2f} GiB "
        f"({verdict}), {cost}"
    )
    return _row(
        rank,
        msg,
        ev,
        "memory model (perfbench/predict/memory.py): ZeRO-paper model states from the parameter count; "
        "cheapest knob by predicted time cost that brings the peak under "
        f"{FIT_TARGET:.0%} of capacity",
        pick["try"],
    )


def find(tables, summary):
    mem = tables.get("memory")
    if mem is None or not len(mem):
        return []
    config = tables.get(CONFIG_KEY) or {}
    rows = []
    for r in mem.to_dict("records"):
        rank = int(r["rank"])
        peak, cap = _num(r.get("peak_bytes")), _num(r.get("capacity_bytes"))
        if peak and cap and peak > NEAR_CAPACITY * cap:
            rows.append(_near_capacity(rank, peak, cap, r, config, summary))
    return rows


RULE = Rule(
    id=ID,
    find=find,
    needs=("memory", CONFIG_KEY),
    thresholds={
        "NEAR_CAPACITY": NEAR_CAPACITY,
        "FIT_TARGET": FIT_TARGET,
        "RECOMPUTE_KEEPS": RECOMPUTE_KEEPS,
        "RECOMPUTE_KEEPS_BY_WORKLOAD": RECOMPUTE_KEEPS_BY_WORKLOAD,
        "RECOMPUTE_TIME_SHARE": RECOMPUTE_TIME_SHARE,
    },
    fires=(
        "a rank's `peak_bytes` above `NEAR_CAPACITY` of its `capacity_bytes` (the `memory` table). Candidates: the "
        "next ZeRO stage (saving from the ZeRO-paper model states, perfbench/predict/memory.py; time cost: one "
        "parameter broadcast per step, taken as D / (2(D-1)) × the step's exposed communication) and "
        "`train.recompute` (saving 1 − `RECOMPUTE_KEEPS` of the peak minus model states and the process baseline, or "
        "1 − the share measured for the workload, `RECOMPUTE_KEEPS_BY_WORKLOAD`; "
        "time cost `RECOMPUTE_TIME_SHARE` of computing). The pick is the cheapest (least time) that brings the peak "
        "under `FIT_TARGET` of capacity, else the largest saving; with no knob left it says so; evidence: peak / "
        "capacity"
    ),
    gain="null: memory, not time (ranks after every finding with a gain); the message carries the saving and cost",
    knobs=("parallel.zero_stage", "train.recompute"),
    tries='the cheapest knob that fits (`{"parallel.zero_stage": z + 1}` or `{"train.recompute": true}`)',
)
