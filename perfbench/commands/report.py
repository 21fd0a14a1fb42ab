"""`perfbench report RUN|SWEEP [-o FILE]`: one self-contained HTML file to share (charts included, no server, no
network): the verdict, the ranked advice with gains, the key numbers, the step breakdown per rank, the
communication matrix, one step's multi-rank timeline, memory per rank, top kernels; for a sweep also the runs
table, scaling and one chart per swept setting (perfbench/views/html_report.py)."""

from __future__ import annotations

import os
import sys

from perfbench.cli import add_results_arg
from perfbench.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write one self-contained HTML report of a run or a sweep (charts inline, opens offline)",
        description="Write one HTML file that opens in any browser with no server and no network (plotly.js is "
        "inlined once, ~4.8 MB): for a run, the verdict and the ranked advice with gains (as `perfbench show` "
        "and `advise` give them), the key numbers, the step breakdown per rank (compute / exposed comm / free, "
        "adding up to the rank's step), the communication matrix (rank x rank bandwidth and link type), memory "
        "per rank, the first profiled step across ranks (a multi-rank timeline) and the top kernels; for a sweep, "
        "the runs table (`perfbench ls`'s columns), samples/s against world size, one chart per swept setting, "
        "then its fastest run in full. A part the run has no "
        "data for says so.",
    )
    p.add_argument(
        "target",
        metavar="RUN|SWEEP",
        help="a run id, short id or unique prefix, or a sweep id (`perfbench ls --sweeps`)",
    )
    p.add_argument("-o", "--output", default="report.html", metavar="FILE", help="where to write (default report.html)")
    add_results_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.store import Store
    from perfbench.views.html_report import run_report, sweep_report

    store = Store(args.results, create=False)
    runs = store.list_runs(sweep=args.target)
    if runs or store.read_sweep(args.target) is not None:
        if not runs:
            raise UserError(f"sweep {args.target} has no runs in {args.results}")
        text = sweep_report(store, args.target, runs)
        what = f"sweep {args.target} ({len(runs)} runs)"
    else:
        rec = store.get_run(args.target)
        text = run_report(store, rec)
        what = f"run {rec['run_id']}"
    out = args.output
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UserError(f"cannot write {out}: no folder {parent}")
    tmp = f"{out}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, out)
    print(f"wrote {out} ({os.path.getsize(out) / 2**20:.1f} MiB): report of {what}", file=sys.stderr)
    return 0
