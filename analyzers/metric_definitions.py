"""Every run-level metric perfbench reports, defined once: its name, label, unit, direction, definition, format,
aggregation and the steps it is computed over (`Metric`, analyzers/metric.py). Data only: the lookups and the
per-view lists are built from it in analyzers/catalogue.py.

Per-step metrics are first computed per step (combining ranks as `aggregation` says, see
analyzers.analyses.step_metrics), and the run's value is the median over the run's measured steps: the same
per-step samples feed `compare`'s intervals and `check`'s tests, so every surface shows one number.

A breakdown part (computing_s, communication_not_overlapped_s, free_s; overlapped_s lies within computing_s) is a
share of `breakdown_step_s`, the profiled step it splits, never of `step_time_s`, the unprofiled step: the two
differ by the profiler's cost (`profiler_overhead`), and views show both with it between them.
"""

from __future__ import annotations

from analyzers.metric import Metric

_STEP = "median over measured steps of the per-step value"
_RANKS_MEAN = "per step: mean over ranks; run: median over steps"

#: in catalogue order (the key metrics lead views in this order); `basis` left out: "run"
DEFINITIONS = [
    Metric(
        "throughput",
        "samples/s",
        "samples/s",
        "higher",
        "per step: sum over ranks of the samples (tokens for LMs) the rank processed / the slowest rank's "
        "step time (workload step records); only last-stage ranks count samples in pipelines",
        "num",
        _STEP,
        series="throughput",
        key=True,
        check=1,
        basis="measured",
    ),
    Metric(
        "step_time_s",
        "step ms",
        "s",
        "lower",
        "per step: max over ranks of the rank's step time (workload step records, wall clock); imported "
        "profiles without workload records: max over ranks of the profiled step window (step_us)",
        "ms",
        _STEP,
        series="step_time_s",
        key=True,
        check=2,
        basis="measured",
    ),
    Metric(
        "computing_s",
        "compute ms",
        "s",
        "lower",
        "per rank and step: union of compute-op intervals in the step window (profiler step trace "
        "'Computing' when present)",
        "ms",
        _RANKS_MEAN,
        series="computing_s",
        key=True,
        basis="profiled",
    ),
    Metric(
        "breakdown_step_s",
        "profiled step ms",
        "s",
        "lower",
        "the profiled step the breakdown splits: computing_s + communication_not_overlapped_s + free_s (each per "
        "step the mean over ranks, run: the median over the profiled steps; overlap lies within computing). Per step "
        "and rank the three add up to the step window step_us exactly; the medians of the parts may differ from the "
        "median window by the steps' spread. It differs from step_time_s (unprofiled steps, slowest rank) by the "
        "profiler's cost and the ranks' spread",
        "ms",
        "sum of the parts' medians over profiled steps",
        basis="profiled",
    ),
    Metric(
        "communication_s",
        "comm ms",
        "s",
        "lower",
        "per rank and step: union of communication-op intervals (step trace 'Communication')",
        "ms",
        _RANKS_MEAN,
        series="communication_s",
        basis="profiled",
    ),
    Metric(
        "communication_not_overlapped_s",
        "exposed comm ms",
        "s",
        "lower",
        "per rank and step: communication not hidden behind computing = |M| - |C ∩ M| (step trace "
        "'Communication(Not Overlapped)')",
        "ms",
        _RANKS_MEAN,
        series="communication_not_overlapped_s",
        key=True,
        check=4,
        basis="profiled",
    ),
    Metric(
        "overlapped_s",
        "overlap ms",
        "s",
        None,
        "per rank and step: communication overlapping computing = |C ∩ M| (step trace 'Overlapped')",
        "ms",
        _RANKS_MEAN,
        series="overlapped_s",
        key=True,
        basis="profiled",
    ),
    Metric(
        "free_s",
        "free ms",
        "s",
        "lower",
        "per rank and step: step window minus (computing ∪ communication) (step trace 'Free')",
        "ms",
        _RANKS_MEAN,
        series="free_s",
        key=True,
        basis="profiled",
    ),
    Metric(
        "preparing_s",
        "preparing ms",
        "s",
        "lower",
        "per rank and step: host step start to the first device op (step trace 'Preparing'); null "
        "without host step data",
        "ms",
        _RANKS_MEAN,
        series="preparing_s",
        basis="profiled",
    ),
    Metric(
        "bubble_s",
        "bubble ms",
        "s",
        "lower",
        "per rank and step: pipeline bubble, time in pipeline receive ops (step trace 'Bubble'); null in a "
        "pipeline run whose receive ops cannot be identified (CPU point-to-point is a Broadcast)",
        "ms",
        _RANKS_MEAN,
        series="bubble_s",
        basis="profiled",
    ),
    Metric(
        "comm_share",
        "comm share",
        "share",
        "lower",
        "per step: mean over ranks of communication_us / step_us (all communication, overlapped or not)",
        "pct",
        _RANKS_MEAN,
        kind="share",
        series="comm_share",
        key=True,
        check=3,
        basis="profiled",
    ),
    Metric(
        "kernel_utilization",
        "compute %",
        "share",
        "higher",
        "per step: sum over ranks of computing_us / sum over ranks of step_us (the share of step time "
        "the device computes)",
        "pct",
        "per step: ratio of sums over ranks; run: median over steps",
        kind="share",
        series="kernel_utilization",
        key=True,
        basis="profiled",
    ),
    Metric(
        "collectives_per_step",
        "coll/step",
        "count",
        None,
        "per step: mean over ranks of the number of collective / point-to-point ops",
        "num",
        _RANKS_MEAN,
        series="collectives",
        basis="measured",
    ),
    Metric(
        "comm_bytes_per_step",
        "bytes/step",
        "bytes",
        None,
        "per step: mean over ranks of the summed payload (size_bytes) of the rank's collectives",
        "bytes",
        _RANKS_MEAN,
        series="comm_bytes",
        basis="measured",
    ),
    Metric(
        "comm_wait_ratio",
        "wait ratio",
        "share",
        "lower",
        "mean over collectives of wait / (wait + transit) (msprof-analyze 'Wait Time Ratio')",
        "pct",
        "mean over collectives and ranks",
        kind="share",
        basis="profiled",
    ),
    Metric(
        "scaling_efficiency",
        "scaling",
        "share",
        "higher",
        "throughput(N) / (N x throughput(1)), throughput(1) = median throughput of the ok 1-rank runs with "
        "the same configuration (config_key) apart from world size and repeat; null without such a run",
        "pct",
        "one value per run (against other runs)",
        kind="share",
        key=True,
        basis="measured",
    ),
    Metric(
        "bubble_fraction",
        "bubble",
        "share",
        "lower",
        "pipeline bubble / step time, mean over stages (analyzers.analyses.pipeline; from the workload's spans "
        "on CPU, the step trace's Bubble on Ascend)",
        "pct",
        "mean over stages and steps",
        kind="share",
        basis="profiled",
    ),
    Metric(
        "stage_compute_imbalance",
        "stage imbalance",
        "ratio",
        "lower",
        "max over pipeline stages / min over stages of the stage's computing time (stage: mean over its "
        "ranks of the rank's mean computing_us per step; ranks marked inconsistent left out; "
        "analyzers.analyses.stages); 1.0 = balanced, null without two stages",
        "num",
        "one value per run",
        basis="profiled",
    ),
    Metric(
        "exposed_p2p_s",
        "exposed p2p ms",
        "s",
        "lower",
        "per rank and step: the part of communication_not_overlapped during which a pipeline point-to-point "
        "op (send, receive, batchSendRecv, Receive-opN) runs (op timeline; else the step trace's "
        "Communication(Not Overlapped) - Communication(Not Overlapped and Exclude Receive); "
        "analyzers.analyses.comm_exposure)",
        "ms",
        "mean over ranks and steps",
        basis="profiled",
    ),
    Metric(
        "exposed_collective_s",
        "exposed coll ms",
        "s",
        "lower",
        "per rank and step: communication_not_overlapped minus exposed_p2p (gradient and other "
        "collectives; analyzers.analyses.comm_exposure)",
        "ms",
        "mean over ranks and steps",
        basis="profiled",
    ),
    Metric(
        "step_cpu_s",
        "step cpu ms",
        "s",
        "lower",
        "per step: max over ranks of the rank process's CPU time (time.process_time, all threads) during the "
        "step (workload step records, cpu_s); less stretched by a busy machine than step_time_s "
        "(analyzers.analyses.step_metrics)",
        "ms",
        _STEP,
        series="cpu_s",
        basis="measured",
    ),
    Metric(
        "checkpoint_cost",
        "ckpt cost",
        "ratio",
        "lower",
        "median step time of measured steps that saved a checkpoint (train.checkpoint_every; the save is inside "
        "the step) / median step time of measured steps that did not, minus 1 (analyzers.analyses.checkpoint_cost)",
        "pct",
        "medians over measured steps with / without a save",
        basis="measured",
    ),
    Metric(
        "checkpoint_save_s",
        "ckpt save ms",
        "s",
        "lower",
        "duration of one synchronous MindSpore save_checkpoint, slowest rank, median over the run's saves "
        "(workload step records, checkpoint_s)",
        "ms",
        "per save: max over ranks; run: median over saves",
    ),
    Metric(
        "expert_load_cv",
        "expert cv",
        "ratio",
        "lower",
        "coefficient of variation (std / mean) of tokens routed per expert, mean over MoE layers and measured steps",
        "num",
        "mean over layers and steps",
        basis="measured",
    ),
    Metric(
        "dropped_tokens_per_step",
        "dropped/step",
        "count",
        "lower",
        "tokens dropped by expert capacity per step, summed over ranks",
        "num",
        _STEP,
        series="dropped_tokens",
        basis="measured",
    ),
    Metric(
        "skipped_steps",
        "skipped steps",
        "count",
        "lower",
        "steps after warm-up whose optimizer update was skipped because the fp16 gradients overflowed "
        "(train.precision fp16, dynamic loss scaling; workload step records `overflow`, a step counts when "
        "any rank skipped it); null for runs without loss scaling",
        "int",
        "count over steps after warm-up",
        basis="measured",
    ),
    Metric(
        "grad_comm_wait_s",
        "grad comm wait ms",
        "s",
        "lower",
        "parallel.overlap_grad_comm: per rank and step, host time after backward returned until the last "
        "asynchronous gradient all-reduce completed (workload span allreduce_wait; the exposed gradient "
        "communication, an upper bound: PyNative kernels still queued count too; analyzers.analyses.grad_overlap)",
        "ms",
        _RANKS_MEAN,
        basis="measured",
    ),
    Metric(
        "grad_buckets_early",
        "buckets early",
        "share",
        "higher",
        "parallel.overlap_grad_comm: per rank and step, share of gradient buckets whose all-reduce was issued "
        "before backward ended (workload spans allreduce vs backward; analyzers.analyses.grad_overlap)",
        "pct",
        _RANKS_MEAN,
        kind="share",
        basis="measured",
    ),
    Metric(
        "profiler_overhead",
        "profiler overhead",
        "ratio",
        "lower",
        "median step time of profiled steps / median step time of unprofiled steps of the same run - 1",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "capture_cost",
        "capture cost",
        "share",
        "lower",
        "share of the run's training time after warm-up that the profiler's capture added: profiled steps' "
        "extra time over the unprofiled median plus the profiler's own calls between steps (analyzers/"
        "analyses/capture_cost.py)",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "profiler_overhead_low",
        "overhead lo",
        "ratio",
        None,
        "lower end of the 95% interval of profiler_overhead: exp(Welch interval of mean log step time of "
        "profiled - unprofiled measured steps) - 1 (analyzers.analyses.steadiness.ratio_interval)",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "profiler_overhead_high",
        "overhead hi",
        "ratio",
        None,
        "upper end of the 95% interval of profiler_overhead (as profiler_overhead_low)",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "capture_cost_low",
        "capture cost lo",
        "share",
        None,
        "capture_cost with the profiled steps' extra time taken at the low end of the interval of their ratio to "
        "the unprofiled steps (analyzers.analyses.steadiness.ratio_interval)",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "capture_cost_high",
        "capture cost hi",
        "share",
        None,
        "capture_cost at the high end of that interval",
        "pct",
        "one value per run",
        kind="share",
    ),
    Metric(
        "step_time_cv",
        "step cv",
        "ratio",
        "lower",
        "robust coefficient of variation of the per-step step_time_s over the measured steps: (Q3 - Q1) / 1.349 / "
        "median (sd / mean for normal steps; one slow step cannot move it; analyzers.analyses.steadiness); above 10% "
        "the run is flagged unsteady",
        "pct",
        "over measured steps",
        basis="measured",
    ),
    Metric(
        "step_cpu_cv",
        "cpu cv",
        "ratio",
        "lower",
        "robust coefficient of variation of the per-step step_cpu_s over the measured steps, as step_time_cv "
        "(analyzers.analyses.steadiness); above 10% the run is flagged unsteady, also by `check --ab`",
        "pct",
        "over measured steps",
        basis="measured",
    ),
    Metric(
        "warmup_drift",
        "drift",
        "share",
        None,
        "median step_time_s of the first third of the measured steps / median of the last third - 1 (> 0: "
        "still getting faster after warm-up; analyzers.analyses.steadiness); beyond 5% with warmup_drift_p < 0.05 the "
        "run is flagged unsteady",
        "pct",
        "thirds of the measured steps",
        kind="share",
        basis="measured",
    ),
    Metric(
        "warmup_drift_p",
        "drift p",
        "ratio",
        None,
        "two-sided Mann-Whitney p of the first vs the last third of the measured steps' step times "
        "(null with fewer than 3 steps a third)",
        "num",
        "thirds of the measured steps",
        basis="measured",
    ),
    Metric(
        "rank_cpu_spread",
        "rank cpu spread",
        "ratio",
        "lower",
        "slowest rank's median CPU time per measured step / fastest rank's - 1 (ranks running at two speeds; "
        "analyzers.analyses.steadiness); above 20% the run is flagged unsteady",
        "pct",
        "medians per rank",
        basis="measured",
    ),
    Metric(
        "capture_calls_s",
        "capture calls",
        "s",
        "lower",
        "total time of the profiler's calls between steps (window start, stop and raw-file write), slowest "
        "rank per step",
        "ms",
        "sum over steps",
    ),
    Metric(
        "profiled_step_time_s",
        "profiled wall ms",
        "s",
        "lower",
        "median over profiled steps of the per-step step_time_s",
        "ms",
        "median over profiled steps",
        basis="profiled",
    ),
    Metric(
        "reconciliation_max_rel_diff",
        "cross-check diff",
        "share",
        "lower",
        "max over ranks, steps and breakdown parts of |recomputed - profiler's own| / step time "
        "(the cross-check of the profiler's step trace against the kernels)",
        "pct",
        "max over ranks and steps",
        kind="share",
        basis="profiled",
    ),
    Metric(
        "peak_memory_bytes",
        "peak mem",
        "bytes",
        "lower",
        "max over ranks of the rank's peak memory: the process's device memory where the profiler records it "
        "(Ascend memory_record APP Total Reserved, max over the profiled window), else the process's resident "
        "high-water mark sampled after every step (at most every 50 ms) by the workload (max over steps of "
        "max(max_rss_bytes = ru_maxrss, rss_bytes = resident set then)), else the "
        "framework allocator's peak reserved (analyzers/analyses/memory.py)",
        "bytes",
        "max over ranks (each rank: max over time)",
    ),
    Metric(
        "memory_headroom",
        "mem headroom",
        "share",
        "higher",
        "1 - used / capacity, the tightest over the memories ranks share: a CPU host's memory (capacity: the "
        "machine's MemTotal the ranks record; used: sum of the peaks of the host's ranks, an upper bound since "
        "peaks need not coincide) or a device's (used: the rank's peak; capacity: device_memory_bytes of the "
        "hardware profile the run names, e.g. perfbench analyze --hardware ascend910); null when the capacity "
        "is unknown (analyzers/analyses/memory.py)",
        "pct",
        "min over hosts / devices",
        kind="share",
    ),
    Metric(
        "loss_first", "first loss", "ratio", None, "mean over ranks of the loss of the first step", "num", "first step"
    ),
    Metric(
        "loss_last", "last loss", "ratio", "lower", "mean over ranks of the loss of the last step", "num", "last step"
    ),
    Metric(
        "measured_steps",
        "measured steps",
        "count",
        None,
        "number of steps the run-level workload metrics are computed over (after warm-up, every rank "
        "finished, unprofiled when the run has unprofiled steps)",
        "int",
        "count",
        basis="measured",
    ),
    Metric(
        "samples_per_step",
        "samples/step",
        "count",
        None,
        "per step: sum over ranks of samples",
        "num",
        _STEP,
        series="samples",
        basis="measured",
    ),
    Metric("ranks", "ranks", "count", None, "ranks analyzed", "int", "count"),
    Metric(
        "steps",
        "profiled steps",
        "count",
        None,
        "distinct steps in the step breakdown",
        "int",
        "count",
        basis="profiled",
    ),
]
