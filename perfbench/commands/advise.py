"""`perfbench advise RUN [--all] [--json] [--try N [--repeats R]]`: the ranked advice of a stored run: each
finding with the step time a fix is expected to save (gain_ms, its share of the step and how it was estimated),
causes first and their symptoms under them, the setting to try where perfbench can change it (analyzers.analyses.advice,
docs/advice.md); with --try, its best knobs proven by real runs (perfbench/run/advise_try.py)."""

from __future__ import annotations

import json
import signal
import sys

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "advise",
        help="a run's advice ranked by expected gain, causes first; --try N runs its N best fixes",
        description="Print the advice of a stored run ranked by the step time a fix is expected to save "
        "(gain_ms per step, from the run's own tables; docs/advice.md gives each rule's formula). "
        "Findings explained by another finding (symptoms) are indented under their cause; each "
        "stretch of waiting or idle time is counted once. At most 5 causes are shown (--all: every "
        "one). --json prints every row of the advice table (id, rule, severity, gain_ms, gain_share, "
        "basis, symptom_of, try, predicted_step_ms, ...) in rank order. Each finding shows its rule's measured "
        'accuracy from the trials --try stored ("this rule\'s gains measured 0.8-1.1x on 6 trials"; --json: '
        "accuracy). With --try N, the N best root "
        "findings that carry a knob (`try`) are each run for real: the run's own configuration with "
        "only that knob changed, repeated --repeats times interleaved with re-runs of the original "
        "configuration (profiler off in all of them). The runs are stored (source: advise) and the "
        "measured gain in ms/step, with its 95% interval, is printed next to the predicted gain; every "
        "result is also kept in <results>/advice/trials.jsonl to check and calibrate the gain "
        "estimates (docs/advice.md). A fix whose run fails is stored failed with its reason and the "
        "others go on. Runs that perfbench did not launch (imported profiles) cannot be re-run: the "
        "advice is printed and --try says so (exit 2).",
    )
    p.add_argument("run", help="run id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix of either")
    p.add_argument("--all", action="store_true", help="show every finding, not only the 5 largest causes")
    p.add_argument(
        "--try",
        dest="try_n",
        type=int,
        default=0,
        metavar="N",
        help="run the N best findings that carry a knob, each as a real run with only that knob changed",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=2,
        metavar="R",
        help="with --try: rounds of (original, fix 1, ..., fix N) runs; the interval needs 2 (default 2)",
    )
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.store import Store

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    rid = rec["run_id"]
    table = store.read_table(rid, "advice") if "advice" in store.table_names(rid) else None
    if not args.try_n:
        _print_advice(args, rec, table, store)
        return 0
    # ---- --try (perfbench/run/advise_try.py) ----
    from perfbench.run.advise_try import render_tried, rerun_problem, try_fixes
    from perfbench.views.results import console

    problem = rerun_problem(rec)
    if problem:
        _print_advice(args, rec, table, store)
        print(f"perfbench: error: --try: {problem}", file=sys.stderr)
        return 2
    if not args.json:
        _print_advice(args, rec, table, store)
    from perfbench.commands.sweep import _progress_events, _raise_interrupt

    signal.signal(signal.SIGTERM, _raise_interrupt)  # unwinds like Ctrl-C: the running fix's processes are killed
    err = console(stderr=True)
    try:
        tried = try_fixes(
            store,
            rec,
            args.try_n,
            repeats=args.repeats,
            advice=table,
            events=_progress_events(err, quiet=False),
            announce=lambda text: print(f"advise --try: {text}", file=sys.stderr, flush=True),
        )
    except UserError as exc:  # cannot re-run it, no knob to try, ...: the advice is printed all the same
        if args.json:
            _print_advice(args, rec, table, store)
        print(f"perfbench: error: --try: {exc}", file=sys.stderr)
        return 2
    if args.json:
        from perfbench.views.advice import ordered_advice

        from perfbench.run.advise_accuracy import with_accuracy

        advice = with_accuracy(ordered_advice(table), store.read_advice_trials())
        print(json.dumps({"run_id": rid, "advice": advice, "tried": tried}, indent=2, default=str))
    else:
        render_tried(console(), tried)
    return 0


def _print_advice(args, rec: dict, table, store) -> None:
    from perfbench.run.advise_accuracy import with_accuracy
    from perfbench.views.results import console
    from perfbench.views.advice import advice_tree, ordered_advice, print_advice
    from perfbench.views.run_numbers import input_problem_lines
    from perfbench.store import short_id

    rid = rec["run_id"]
    advice = with_accuracy(ordered_advice(table), store.read_advice_trials())  # each rule's measured accuracy
    if args.json:
        roots = [r for r, _ in advice_tree(advice)]
        print(
            json.dumps(
                {
                    "run_id": rid,
                    "verdict": roots[0]["id"] if roots else None,
                    "input_problems": list(rec.get("input_problems") or []),
                    "advice": advice,
                },
                indent=2,
                default=str,
            )
        )
        return
    c = console()
    c.print(
        f"[bold]{short_id(rec)}[/bold] ({rid}): {len(advice)} finding(s), "
        f"{len(advice_tree(advice))} cause(s), largest expected gain first",
        highlight=False,
    )
    for line in input_problem_lines(rec):
        c.print(f"  [yellow]Missing or damaged input:[/yellow] {line}", highlight=False)
    if not advice:
        c.print("  no advice rule fired" if table is not None else "  no advice table (the run has no analysis)")
        return
    print_advice(c, advice, show_all=args.all)
