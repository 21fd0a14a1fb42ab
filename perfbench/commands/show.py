"""`perfbench show RUN`: one run, verdict first: the top advice and its evidence, the key numbers with units,
the per-rank breakdown, top kernels and collectives, flagged slow ranks/links, the failure reason."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.records import RANK_DETAIL_TABLES, Records, rank_detail_name

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
    p.add_argument(
        "--rank",
        type=int,
        metavar="R",
        help="one rank's memory detail: its peaks, memory timeline and the allocations live at its peak (computed "
        "on first use for a cluster imported in summary mode, then cached in the store)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    if args.rank is not None:
        return _rank(args)
    from perfbench.views.results import console, summarize
    from perfbench.views.run_report import render
    from perfbench.store import Store, short_id

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    rid = rec["run_id"]
    row = summarize([rec], context=store.list_runs())[0]
    names = [n for n in store.table_names(rid) if not n.startswith("detail_rank")]
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


def _rank(args) -> int:
    """`show RUN --rank R`: the rank's memory detail (perfbench.run.ingest.rank_detail). Once cached in the store,
    the text view reads the cached tables with pyarrow alone (no pandas, no analyzers: the call costs the CLI's
    start-up and the few small tables)."""
    records = Records(args.results, create=False)
    rec = records.get_run(args.run)
    r, rid = args.rank, rec["run_id"]
    if not args.json and records.table_path(rid, rank_detail_name(r, "done")).exists():
        import pyarrow.parquet as pq

        paths = {t: records.table_path(rid, rank_detail_name(r, t)) for t in RANK_DETAIL_TABLES}
        try:
            tables = {
                t: tab.to_pydict()
                for t, p in paths.items()
                if p.exists() and (tab := pq.ParquetFile(p).read()).num_rows
            }
        except (OSError, ValueError):  # a damaged cache: rank_detail below says which file and computes it again
            pass
        else:
            return _print_rank(r, tables, args.top)
    from perfbench.run.ingest import rank_detail
    from perfbench.store import Store

    frames = rank_detail(Store(args.results, create=False), rid, r, config=rec.get("config"))
    if args.json:
        doc = {
            "run_id": rid,
            "rank": r,
            "tables": {k: json.loads(v.to_json(orient="records")) for k, v in frames.items()},
        }
        print(json.dumps(doc, indent=2, default=str))
        return 0
    return _print_rank(r, {k: v.to_dict("list") for k, v in frames.items()}, args.top)


def _known(values) -> list:
    """The values that are not None or NaN (what pandas' max, sum and nunique count)."""
    return [v for v in values if v is not None and v == v]


def _print_rank(r: int, tables: dict[str, dict[str, list]], top: int) -> int:
    """The text view of a rank's memory detail from its tables as {table: {column: values}}."""
    mem = tables.get("memory")
    if not mem or not mem.get("rank"):
        print(f"rank {r}: no memory recorded")
        return 0
    m = {k: v[0] for k, v in mem.items()}

    def gib(v) -> str:
        return "unknown" if v is None or v != v else f"{v / 2**30:.2f} GiB"

    print(
        f"rank {r}: peak {gib(m['peak_bytes'])} ({m['peak_source']}); allocator {m['allocator']} allocated "
        f"{gib(m['peak_allocated_bytes'])}, reserved {gib(m['peak_reserved_bytes'])}"
    )
    tl = tables.get("memory_timeline")
    if tl is not None:
        ts = _known(tl["ts_us"])
        span = (max(ts) - min(ts)) / 1e6 if ts else float("nan")
        print(
            f"memory timeline: {len(tl['ts_us'])} points over {len(set(_known(tl['component'])))} components "
            f"({span:.3f} s)"
        )
    live = tables.get("memory_live")
    if live is not None and live.get("size_bytes"):
        sizes = live["size_bytes"]
        print(f"allocations live at the peak: {len(sizes)}, {gib(float(sum(_known(sizes))))}; largest {top}:")
        for size, name in list(zip(sizes, live["name"]))[:top]:
            print(f"  {size / 2**20:10.1f} MiB  {name}")
    att = tables.get("memory_attribution")
    if att is not None and att.get("part"):
        print("what holds the peak:")
        for part, b in zip(att["part"], att["bytes"]):
            print(f"  {part:<24} {gib(b)}")
    return 0
