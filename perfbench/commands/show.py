"""`perfbench show RUN`: one run, verdict first: the top advice and its evidence, the key numbers with units,
the per-rank breakdown, top kernels and collectives, flagged slow ranks/links, the failure reason."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg

#: raw profiler tables: in --json as a row count only (use `perfbench trace` or the store for them)
RAW_TABLES = ("profile_ops",)


def register(sub) -> None:
    p = sub.add_parser(
        "show",
        help="show one run: verdict, key numbers, per-rank breakdown, top kernels and collectives",
        description="Show one run, most important first: the top advice (what is slow, why, what to try) with its "
        "evidence; the key numbers with units (metric catalogue: `perfbench metrics`); the per-rank "
        "step breakdown in ms and % of the step; the top kernels and collectives; slow ranks, slow "
        "links and imbalanced groups (flagged ones only, with how many were tested); the advice ranked by "
        "expected gain (ms per step), symptoms indented under their cause, at most 5 causes (--all: "
        "every one); why "
        "a failed run failed and the tail of its log. --json prints the record and every analysis table "
        "in full.",
    )
    p.add_argument("run", help="run id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix of either")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--top", type=int, default=10, help="how many kernels/collectives to list (default 10)")
    p.add_argument(
        "--all", action="store_true", help="list every advice root (default: the 5 with the largest expected gain)"
    )
    p.add_argument(
        "--wide", action="store_true", help="every table column, even where a table is wider than the terminal"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.views.results import console, summarize
    from perfbench.views.run_report import render
    from perfbench.store import Store, short_id

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    rid = rec["run_id"]
    row = summarize([rec], context=store.list_runs())[0]
    names = store.table_names(rid)
    if args.json:
        tables = {}
        for name in names:
            df = store.read_table(rid, name)
            tables[name] = (
                {"rows": len(df), "omitted": "raw profiler ops: `perfbench trace` writes them"}
                if name in RAW_TABLES
                else json.loads(df.to_json(orient="records"))
            )
        print(json.dumps(dict(rec, summary=row, tables=tables), indent=2, default=str))
        return 0
    tables = {name: store.read_table(rid, name) for name in names if name not in RAW_TABLES}
    render(
        console(wide=args.wide),
        rec,
        row,
        tables,
        short=short_id(rec),
        top=args.top,
        artifacts=str(store.run_dir(rid) / "artifacts"),
        show_all=args.all,
        wide=args.wide,
    )
    return 0
