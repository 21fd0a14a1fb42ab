"""`perfbench advise RUN`: the ranked advice of a stored run: each finding with the step time a fix is
expected to save (gain_ms, its share of the step and how it was estimated), causes first and their
symptoms under them, the setting to try where perfbench can change it (analyzers.advice, docs/advice.md)."""

from __future__ import annotations

import json

from perfbench.cli import add_json_arg, add_results_arg


def register(sub) -> None:
    p = sub.add_parser(
        "advise", help="a run's advice ranked by expected gain, causes first, with the setting to try",
        description="Print the advice of a stored run ranked by the step time a fix is expected to save "
                    "(gain_ms per step, from the run's own tables; docs/advice.md gives each rule's formula). "
                    "Findings explained by another finding (symptoms) are indented under their cause; each "
                    "stretch of waiting or idle time is counted once. At most 5 causes are shown (--all: every "
                    "one). --json prints every row of the advice table (id, rule, severity, gain_ms, gain_share, "
                    "basis, symptom_of, try, predicted_step_ms, ...) in rank order.")
    p.add_argument("run", help="run id, the short id `perfbench ls` shows (e.g. ws2-r0), or a unique prefix of either")
    p.add_argument("--all", action="store_true", help="show every finding, not only the 5 largest causes")
    add_results_arg(p)
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.results import console
    from perfbench.run_report import advice_tree, ordered_advice, print_advice
    from perfbench.store import Store, short_id

    store = Store(args.results, create=False)
    rec = store.get_run(args.run)
    rid = rec["run_id"]
    table = store.read_table(rid, "advice") if "advice" in store.table_names(rid) else None
    advice = ordered_advice(table)
    if args.json:
        roots = [r for r, _ in advice_tree(advice)]
        print(json.dumps({"run_id": rid, "verdict": roots[0]["id"] if roots else None, "advice": advice},
                         indent=2, default=str))
        return 0
    c = console()
    c.print(f"[bold]{short_id(rec)}[/bold] ({rid}): {len(advice)} finding(s), "
            f"{len(advice_tree(advice))} cause(s), largest expected gain first", highlight=False)
    if not advice:
        c.print("  no advice rule fired" if table is not None else "  no advice table (the run has no analysis)")
        return 0
    print_advice(c, advice, show_all=args.all)
    return 0
