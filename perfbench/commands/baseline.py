"""`perfbench baseline save RUN|SWEEP --name N` records a baseline for `perfbench check`;
`perfbench baseline ls` lists them; `perfbench baseline show N` prints one."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "baseline", help="save / list / show baselines for `perfbench check`", description=__doc__
    )
    sub = p.add_subparsers(dest="baseline_command", metavar="ACTION")
    s = sub.add_parser("save", help="save a run or a sweep as a named baseline")
    s.add_argument(
        "target",
        metavar="RUN|SWEEP",
        help="sweep id, or a run: its id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix",
    )
    s.add_argument("--name", required=True, help="baseline name (letters, digits, . _ -)")
    s.add_argument("--no-overwrite", action="store_true", help="fail if a baseline with this name exists")
    s.add_argument("--label", metavar="TEXT", help="name of this point in the history (default: the git commit)")
    add_results_arg(s)
    add_json_arg(s)
    s.set_defaults(func=save)
    ls = sub.add_parser("ls", help="list saved baselines")
    add_results_arg(ls)
    add_json_arg(ls)
    ls.set_defaults(func=list_)
    sh = sub.add_parser("show", help="print a saved baseline's runs and metrics")
    sh.add_argument("name")
    add_results_arg(sh)
    add_json_arg(sh)
    sh.set_defaults(func=show)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def save(args) -> int:
    from perfbench.regress import history
    from perfbench.regress.baseline import save_baseline
    from perfbench.store import Store

    store = Store(args.results, create=False)
    history.check_label(args.label)
    b = save_baseline(store, args.target, args.name, overwrite=not args.no_overwrite)
    history.record(store, args.target, via="baseline", label=args.label)  # a baseline is a point of the history too
    if args.json:
        print(
            json.dumps(
                {
                    "name": b["name"],
                    "source": b["source"],
                    "runs": [r["run_id"] for r in b["runs"]],
                    "skipped": b["skipped"],
                },
                indent=2,
            )
        )
    else:
        print(
            f"baseline {b['name']!r}: {b['source']['kind']} {b['source']['id']}, {len(b['runs'])} run(s)"
            + (f", {len(b['skipped'])} unfinished/failed run(s) left out" if b["skipped"] else "")
        )
    return 0


def list_(args) -> int:
    from perfbench.store import Store

    store = Store(args.results, create=False)
    rows = []
    for name in store.list_baselines():
        b = store.read_baseline(name) or {}
        rows.append(
            {"name": name, "source": b.get("source"), "runs": len(b.get("runs") or []), "created": b.get("created")}
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no baselines (save one with `perfbench baseline save RUN|SWEEP --name N`)")
    else:
        for r in rows:
            src = r["source"] or {}
            print(f"{r['name']}\t{src.get('kind')} {src.get('id')}\t{r['runs']} run(s)")
    return 0


def show(args) -> int:
    from perfbench.regress.baseline import load_baseline
    from perfbench.store import Store

    b = load_baseline(Store(args.results, create=False), args.name)
    if args.json:
        print(json.dumps(b, indent=2))
        return 0
    print(f"baseline {b['name']}: {b['source']['kind']} {b['source']['id']}")
    for r in b["runs"]:
        m = r.get("metrics") or {}
        print(
            f"  {r['run_id']}  {r['settings']}  throughput={m.get('throughput')}  step_time_s={m.get('step_time_s')}"
            f"  samples={ {k: len(v) for k, v in (r.get('samples') or {}).items()} }"
        )
    return 0
