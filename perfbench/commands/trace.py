"""`perfbench trace RUN -o FILE`: one merged, clock-aligned Chrome-trace / Perfetto JSON of a run."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg


def register(sub) -> None:
    p = sub.add_parser(
        "trace",
        help="write one merged, clock-aligned trace of a run (Perfetto / chrome://tracing)",
        description="Write one Chrome-trace JSON of a stored run for Perfetto (ui.perfetto.dev) or chrome://tracing: "
        "a process per rank with tracks for steps, compute ops (per stream) and collectives, and flow "
        "arrows linking each collective's parts across ranks; the workload's own spans (forward, "
        "backward, send, recv per micro-batch) on a track of their own. Clocks: sweep runs share the "
        "host's epoch "
        "clock; imported profiles from one host keep the profiler's clock; from several hosts each rank "
        "is shifted so its collectives end with the lowest rank's (--align). Built from the stored "
        "tables only, so it works for sweep runs and `perfbench analyze` imports alike.",
    )
    p.add_argument("run", help="run id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="trace file to write; gzip-compressed when it ends in .gz (e.g. run.json.gz)",
    )
    p.add_argument(
        "--align",
        choices=("auto", "none", "collectives"),
        default="auto",
        help="clock alignment across ranks (default auto: see above)",
    )
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.store import Store
    from perfbench.views.trace import write_trace

    summary = write_trace(Store(args.results, create=False), args.run, args.output, align=args.align)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    n = sum(sum(c.values()) for c in summary["events"].values())
    print(
        f"wrote {summary['path']}: {len(summary['ranks'])} ranks, {n} slices, "
        f"{summary['collectives_linked']} collectives linked across ranks"
    )
    print(f"clocks: {summary['clock_alignment']}")
    if summary["collectives_without_start"]:
        print(f"left out: {summary['collectives_without_start']} collectives the profile gives no start time")
    print("open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing")
    return 0
