"""`perfbench show RUN`: one run in detail: settings, environment, metrics, per-rank breakdown, top ops, collectives."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg


def register(sub) -> None:
    p = sub.add_parser("show", help="show one run in detail",
                       description="Show one run: settings, status (and why it failed), environment, metrics, "
                                   "per-rank step breakdown, top kernels and collectives. RUN may be a unique prefix.")
    p.add_argument("run", help="run id (or a unique prefix)")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--top", type=int, default=10, help="how many kernels/collectives to list (default 10)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.results import console, fmt, summarize
    from perfbench.store import Store

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    rid = rec["run_id"]
    row = summarize([rec], context=store.list_runs())[0]
    tables = {name: store.read_table(rid, name) for name in store.table_names(rid)}
    if args.json:
        doc = dict(rec, summary=row, tables={k: json.loads(v.head(1000).to_json(orient="records")) for k, v in tables.items()
                                              if k not in ("workload_steps", "spans", "ops")})
        print(json.dumps(doc, indent=2, default=str))
        return 0
    from rich.table import Table

    c = console()
    c.print(f"[bold]{rid}[/bold]  status: {rec['status']}  sweep: {rec.get('sweep_id')}  source: {rec.get('source')}")
    if rec.get("error"):
        c.print(f"[red]error:[/red] {rec['error']}")
        if rec.get("log_tail"):
            c.print("[dim]--- tail of the failing rank's log ---[/dim]")
            c.print(rec["log_tail"], markup=False, highlight=False)
    c.print("settings: " + ", ".join(f"{k}={v}" for k, v in rec.get("settings", {}).items()))
    env = rec.get("env") or {}
    if env:
        c.print("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    m = rec.get("metrics") or {}
    c.print(f"throughput {fmt(row['throughput'])} samples/s, step {fmt(row['step_time_s'], 'ms')} ms, "
            f"comm share {fmt(row['comm_share'], 'pct')}, kernel util {fmt(row['kernel_utilization'], 'pct')}, "
            f"scaling eff {fmt(row['scaling_efficiency'], 'pct')}")
    extra = {k: v for k, v in m.items() if k not in ("throughput", "step_time_s", "comm_share", "kernel_utilization")}
    if extra:
        c.print("metrics: " + ", ".join(f"{k}={fmt(v)}" for k, v in extra.items()))
    bd = tables.get("step_breakdown")
    if bd is not None and len(bd):
        t = Table(title="per-rank step breakdown (median over profiled steps, ms)")
        cols = ["step_us", "computing_us", "communication_not_overlapped_us", "overlapped_us", "free_us"]
        cols = [col for col in cols if col in bd.columns]
        for col in ["rank", *cols]:
            t.add_column(col.replace("_us", ""), justify="right")
        for rank, g in bd.groupby("rank"):
            t.add_row(str(rank), *[f"{g[col].median() / 1000:.2f}" for col in cols])
        c.print(t)
    for name, sort_col in (("kernels", "total_us"), ("comm_ops", "elapse_ms")):
        df = tables.get(name)
        if df is not None and len(df):
            if sort_col in df.columns:
                df = df.sort_values(sort_col, ascending=False)
            c.print(f"[bold]{name}[/bold] (top {args.top})")
            c.print(df.head(args.top).to_string(index=False, max_colwidth=60), markup=False, highlight=False)
    for name in ("slow_ranks", "advice", "pipeline", "experts"):
        df = tables.get(name)
        if df is not None and len(df):
            c.print(f"[bold]{name}[/bold]")
            c.print(df.head(args.top * 2).to_string(index=False, max_colwidth=100), markup=False, highlight=False)
    c.print(f"artifacts: {store.run_dir(rid) / 'artifacts'}")
    return 0
