"""`perfbench advise RUN [--all] [--json] [--try N [--repeats R]]`: the ranked advice of a stored run and, with
--try, its best knobs proven by real runs (perfbench/advise_try.py)."""

from __future__ import annotations

import json
import sys

from perfbench.cli import add_json_arg, add_results_arg

#: roots shown without --all (issue 23)
MAX_ROOTS = 5


def register(sub) -> None:
    p = sub.add_parser(
        "advise", help="the ranked advice of a run; --try N runs its N best fixes and measures their gains",
        description="Print the advice of a stored run, the finding with the largest expected gain first. With "
                    "--try N, the N best root findings that carry a knob (`try`) are each run for real: the run's "
                    "own configuration with only that knob changed, repeated --repeats times interleaved with "
                    "re-runs of the original configuration (profiler off in all of them). The runs are stored "
                    "(source: advise) and the measured gain in ms/step, with its 95% interval, is printed next to "
                    "the predicted gain; every result is also kept in <results>/advice/trials.jsonl to check "
                    "and calibrate the gain estimates (docs/advice.md). A fix whose run fails is stored failed "
                    "with its reason and the others go on. Runs that perfbench did not launch (imported "
                    "profiles) cannot be re-run: the advice is printed and --try says so (exit 2).")
    p.add_argument("run", help="run id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix of either")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--all", action="store_true", help=f"show every finding (default: the {MAX_ROOTS} best roots "
                                                      "and their symptoms)")
    p.add_argument("--try", dest="try_n", type=int, default=0, metavar="N",
                   help="run the N best findings that carry a knob, each as a real run with only that knob changed")
    p.add_argument("--repeats", type=int, default=2, metavar="R",
                   help="with --try: rounds of (original, fix 1, ..., fix N) runs; the interval needs 2 (default 2)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.store import Store

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    advice = store.read_table(rec["run_id"], "advice")
    rows = [] if advice is None else json.loads(advice.to_json(orient="records"))
    if not args.try_n:
        _print_advice(args, rec, rows)
        return 0
    # ---- --try (perfbench/advise_try.py) ----
    from perfbench.advise_try import render_tried, rerun_problem, try_fixes
    from perfbench.errors import UserError
    from perfbench.results import console

    problem = rerun_problem(rec)
    if problem:
        _print_advice(args, rec, rows)
        print(f"perfbench: error: --try: {problem}", file=sys.stderr)
        return 2
    if not args.json:
        _print_advice(args, rec, rows)
    import signal

    from perfbench.commands.sweep import _progress_events, _raise_interrupt

    signal.signal(signal.SIGTERM, _raise_interrupt)  # unwinds like Ctrl-C: the running fix's processes are killed
    err = console(stderr=True)
    try:
        tried = try_fixes(store, rec, args.try_n, repeats=args.repeats, advice=advice,
                          events=_progress_events(err, quiet=False),
                          announce=lambda text: print(f"advise --try: {text}", file=sys.stderr, flush=True))
    except UserError as exc:  # cannot re-run it, no knob to try, ...: the advice is printed all the same
        if args.json:
            _print_advice(args, rec, rows)
        print(f"perfbench: error: --try: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"run_id": rec["run_id"], "advice": rows, "tried": tried}, indent=2, default=str))
    else:
        render_tried(console(), tried)
    return 0


def _print_advice(args, rec: dict, rows: list[dict]) -> None:
    """Minimal printing (the advice-core side owns the real one: roots, gains, symptoms indented)."""
    if args.json:
        print(json.dumps({"run_id": rec["run_id"], "advice": rows}, indent=2, default=str))
        return
    from perfbench.results import console

    out = console()
    if not rows:
        out.print(f"run {rec['run_id']}: no advice")
        return
    roots = 0
    for r in rows:
        root = not r.get("symptom_of")
        roots += root
        if not args.all and root and roots > MAX_ROOTS:
            break
        gain = r.get("gain_ms")
        out.print(f"{'' if root else '    '}({r.get('severity')}) {r.get('rule')}"
                  f"{'' if gain is None else f' (gain {gain:.1f} ms/step)'}: {r.get('message')}",
                  markup=False, highlight=False)
