"""Where HolisticTraceAnalysis ends its window on a Kineto GPU trace, and its temporal breakdown with the window
ended where its own rule means to (the CPU-side start of the last ProfilerStep).

    HTA_DISABLE_NS_ROUNDING=1 .venv/bin/python bench/bench_kineto_hta_window.py FOLDER

HTA 0.5.0 (`hta/common/trace.py`, `Trace._filter_irrelevant_gpu_kernels`, include_last_profiler_step False)
keeps the CPU events that start before `last_profiler_start` and the GPU kernels whose correlation one of them
carries; `last_profiler_start` is the largest `ts` among the events of its CPU filter whose name holds
"ProfilerStep". HTA's parser gives the GPU-side copies of the step annotations (`cat` gpu_user_annotation, which
start when the GPU reaches the step) stream -1 as well, so they pass its CPU filter: when the GPU runs behind the
CPU, the cutoff is the GPU-side start of the last step, inside the last CPU step, and the launches of that step up
to it are kept. This prints, per rank, both cutoffs and HTA's temporal breakdown with each (HTA's own function,
`BreakdownAnalysis.get_temporal_breakdown`, on the frame filtered both ways).
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__)
        return 2
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    import pandas as pd
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.trace_analysis import TraceAnalysis

    cols = ["idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"]
    default = BreakdownAnalysis.get_temporal_breakdown(TraceAnalysis(trace_dir=argv[0]).t, visualize=False)
    ta = TraceAnalysis(trace_dir=argv[0], include_last_profiler_step=True)
    names = ta.t.symbol_table.get_sym_table()
    rows = []
    for rank, df in list(ta.t.traces.items()):
        name, cat = df["name"].map(names.__getitem__), df["cat"].map(names.__getitem__)
        steps = df[name.str.contains("ProfilerStep") & df["stream"].lt(0)]
        hta_cut = steps["ts"].max()
        cpu_cut = steps.loc[cat.loc[steps.index].eq("user_annotation"), "ts"].max()
        which = cat.loc[steps["ts"].idxmax()] + " " + name.loc[steps["ts"].idxmax()]
        cpu = df[df["stream"].lt(0) & ~cat.eq("gpu_user_annotation")]
        kept = set(cpu.loc[cpu["ts"] < cpu_cut, "correlation"])
        gpu = df[df["stream"].gt(0)]
        ta.t.traces[rank] = pd.concat([gpu[gpu["correlation"].isin(kept)], cpu[cpu["ts"] < cpu_cut]])
        rows.append((rank, hta_cut, which, cpu_cut))
    fixed = BreakdownAnalysis.get_temporal_breakdown(ta.t, visualize=False)
    for rank, hta_cut, which, cpu_cut in rows:
        print(f"rank {rank}: HTA's cutoff {hta_cut:,.1f} us ({which}); the last CPU ProfilerStep starts {cpu_cut:,.1f}")
        for label, r in (("HTA as it runs", default), ("HTA cut at the CPU step", fixed)):
            v = r[r["rank"] == rank][cols].iloc[0]
            print(f"  {label:<24} " + ", ".join(f"{c} {v[c]:,.1f}" for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
