"""`perfbench tune CONFIG`: search the config's sweep axes with Optuna for the best settings."""

from __future__ import annotations

import json
import signal
import sys
import time

from perfbench.cli import DEFAULT_RESULTS, add_json_arg, add_results_arg


def register(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="search the sweep axes for the best settings (Optuna) at a fraction of a sweep's cost",
        description=(
            "Search the space spanned by CONFIG's sweep axes (a list = categorical choices; {low, high, log, step} = "
            "a numeric range) for the settings that optimize the objective (default: throughput). Each trial is a "
            "real msrun run, stored like a sweep's runs (source: tune, status ok, pruned or failed); the pruner "
            "stops trials that fall behind while they train. The optional `search:` section of the config sets "
            "strategy (tpe|random|grid), pruner (successive_halving|hyperband|none), budget (trials, minutes), "
            "objective and constraints. At the end the best few trials (within 25% of the best) are re-measured "
            "side by side, interleaved (search.confirm: top 2, rounds 2, band 0.25), and the best is the best median "
            "of each one's trial and re-measurements, not one lucky run. "
            "The study is kept in the results folder: --resume continues a killed search. "
            "See docs/tune.md."
        ),
    )
    p.add_argument("config", help="sweep YAML file with the axes to search (see examples/tune-resnet50.yaml)")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest search of this config's name; finished trials are not run again",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.run.config import load_config

    cfg = load_config(args.config)
    from rich.console import Console

    from perfbench.store import Store
    from perfbench.run.sweep import resolve_results_dir
    from perfbench.tune.search import run_tune

    signal.signal(signal.SIGTERM, _raise_interrupt)  # unwinds like Ctrl-C: the running trial's processes are killed
    results = resolve_results_dir(args.results, cfg, cli_given=args.results != DEFAULT_RESULTS)
    store = Store(results)
    err = Console(stderr=True)
    try:
        rec = run_tune(cfg, store, resume=args.resume, events=_events(err))
    except KeyboardInterrupt:
        flag = f" --results {args.results}" if args.results != DEFAULT_RESULTS else ""
        print(
            f"perfbench: tune interrupted; finished trials are kept in {results}. "
            f"Continue with `perfbench tune {args.config} --resume{flag}`",
            file=sys.stderr,
        )
        return 130
    ans = rec["answer"]
    if args.json:
        print(json.dumps(ans, indent=2, default=str))
    else:
        from perfbench.views.results import console
        from perfbench.views.tune import render

        render(console(), ans, results)
    return 0 if ans["best"] is not None else 1


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _events(console):
    from perfbench.tune.search import TuneEvents

    t0 = {}

    def started(n, settings):
        t0["t"] = time.time()
        print(f"trial {n}: {_fmt(settings)} ...", file=sys.stderr, flush=True)

    def finished(n, settings, rec):
        m = rec.get("metrics") or {}
        tp = m.get("throughput")
        what = {"ok": f"ok, {tp:.1f} samples/s" if tp else "ok", "pruned": f"pruned ({rec.get('error')})"}.get(
            rec["status"], f"FAILED: {rec.get('error')}"
        )
        print(f"trial {n}: {what} ({time.time() - t0.get('t', time.time()):.0f} s)", file=sys.stderr, flush=True)

    def reused(n, settings, earlier):
        print(
            f"trial {n}: {_fmt(settings)} measured already in trial {earlier}: not run again",
            file=sys.stderr,
            flush=True,
        )

    def finalist(settings):
        print(f"best: {_fmt(settings)}: re-running it with the profiler to explain it", file=sys.stderr, flush=True)

    def confirm_started(n, rnd, settings, profiled):
        t0["t"] = time.time()
        print(
            f"confirm round {rnd}: trial {n} ({_fmt(settings)}){' with the profiler' if profiled else ''} ...",
            file=sys.stderr,
            flush=True,
        )

    def confirm_finished(n, rnd, settings, rec):
        tp = (rec.get("metrics") or {}).get("throughput")
        what = f"{tp:.1f} samples/s" if rec["status"] == "ok" and tp else f"{rec['status']}: {rec.get('error')}"
        print(
            f"confirm round {rnd}: trial {n}: {what} ({time.time() - t0.get('t', time.time()):.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    return TuneEvents(
        trial_started=started,
        trial_finished=finished,
        trial_reused=reused,
        finalist=finalist,
        confirm_started=confirm_started,
        confirm_finished=confirm_finished,
    )


def _fmt(settings: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k not in ("workload", "repeat"))
