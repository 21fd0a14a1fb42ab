"""`perfbench sweep CONFIG`: run every configuration of a sweep through msrun and store the results."""

from __future__ import annotations

import json
import signal
import sys
import time

from perfbench.cli import DEFAULT_RESULTS, add_json_arg, add_results_arg


def register(sub) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a sweep of MindSpore training runs through msrun and store the results",
        description=(
            "Run every combination of the sweep axes in CONFIG (x repeats) as a real MindSpore training job "
            "launched with msrun, capture per-step timings and the profiler's output, analyze it and store it. "
            "A failed or hung run is recorded as failed and the sweep goes on. See docs/config.md."
        ),
    )
    p.add_argument("config", help="sweep YAML file (see examples/)")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--dry-run", action="store_true", help="validate the config and print the planned runs; run nothing")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the latest sweep of this name: run only runs that did not finish",
    )
    p.add_argument("--retry-failed", action="store_true", help="with --resume, also re-run runs that failed")
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.run.config import load_config

    cfg = load_config(args.config)
    if args.dry_run:
        return _dry_run(cfg, args)

    from rich.console import Console

    from perfbench.views.results import console, render_table, summarize
    from perfbench.store import Store
    from perfbench.run.sweep import resolve_results_dir, run_sweep

    # SIGTERM (CI cancel, kill) unwinds like Ctrl-C: the running run's processes are killed and it
    # stays "running" in the store, so `--resume` re-runs it; finished runs are already committed.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    results = resolve_results_dir(args.results, cfg, cli_given=args.results != DEFAULT_RESULTS)
    store = Store(results)
    err = Console(stderr=True)
    events = _progress_events(err, quiet=False)
    try:
        sweep = run_sweep(cfg, store, resume=args.resume, retry_failed=args.retry_failed, events=events)
    except KeyboardInterrupt:
        print(
            f"perfbench: sweep interrupted; finished runs are kept in {results}. "
            f"Continue with `perfbench sweep {args.config} --resume"
            + (f" --results {args.results}`" if args.results != DEFAULT_RESULTS else "`"),
            file=sys.stderr,
        )
        return 130
    records = [store.read_run(rid) for rid in sweep["runs"]]
    records = [r for r in records if r]
    rows = summarize(records, context=store.list_runs())
    failed = [r for r in rows if r["status"] != "ok"]
    if args.json:
        print(json.dumps({"sweep_id": sweep["sweep_id"], "results": str(results), "runs": rows}, indent=2, default=str))
    else:
        out = console()
        out.print(render_table(rows, title=f"sweep {sweep['sweep_id']}", width=out.width))
        for r in failed:
            out.print(f"[red]{r['run_id']} failed:[/red] {r['error']}")
        flag = "" if args.results == DEFAULT_RESULTS and not cfg.results else f" --results {results}"
        out.print(
            f"results stored in {results} (sweep {sweep['sweep_id']}); "
            f"see `perfbench ls{flag}` and `perfbench show RUN{flag}`"
        )
    return 1 if failed and len(failed) == len(rows) else 0


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _dry_run(cfg, args) -> int:
    plans = cfg.plan(f"{cfg.name}-<time>")
    if args.json:
        print(
            json.dumps(
                [{"run_id": p.run_id, "settings": p.settings, "run_config": p.run_config} for p in plans],
                indent=2,
                default=str,
            )
        )
        return 0
    from rich.table import Table

    from perfbench.views.results import console

    t = Table(title=f"{len(plans)} planned runs of sweep {cfg.name} ({cfg.workload})")
    keys = list(plans[0].settings) if plans else []
    t.add_column("#", justify="right")
    for k in keys:
        t.add_column(k)
    for i, p in enumerate(plans, 1):
        t.add_row(str(i), *[str(p.settings[k]) for k in keys])
    console().print(t)
    if cfg.workload == "script" and plans:  # what each rank runs (the first run's resolved templates)
        import shlex

        sc = plans[0].run_config["script"]
        launcher = "torchrun" if sc["framework"] == "pytorch" else "msrun"
        console().print(
            f"each rank runs (run 1, under {launcher}): " + shlex.join(["python", sc["path"], *sc["args"]]),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        if sc.get("env"):
            console().print(
                "with " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sc["env"].items()), markup=False, soft_wrap=True
            )
    return 0


def _progress_events(console, quiet: bool):
    from perfbench.run.sweep import SweepEvents

    interactive = console.is_terminal
    state = {"status": None}

    def started(i, n, plan):
        label = f"[{i}/{n}] {plan.run_id}"
        state["label"], state["t0"] = label, time.time()
        if interactive:
            state["status"] = console.status(f"{label}: starting ...")
            state["status"].start()
        else:
            print(f"{label}: started", file=sys.stderr, flush=True)

    def progress(plan, done, total):
        if state["status"] is not None:
            what = f"{done}/{total} rank-steps" if done < total else "steps done; writing profiler output and analyzing"
            state["status"].update(f"{state['label']}: {what} ({time.time() - state['t0']:.0f} s)")

    def waiting(plan, text):  # launch.backend slurm: the job's state and Slurm's reason, as they change
        if state["status"] is not None:
            state["status"].update(f"{state['label']}: {text} ({time.time() - state['t0']:.0f} s)")
        else:
            print(f"{state['label']}: {text} ({time.time() - state['t0']:.0f} s)", file=sys.stderr, flush=True)

    def finished(i, n, plan, rec):
        if state["status"] is not None:
            state["status"].stop()
            state["status"] = None
        m = rec.get("metrics") or {}
        if rec["status"] == "ok":
            tp = m.get("throughput")
            msg = f"ok, {tp:.1f} samples/s" if tp else "ok"
        else:
            msg = f"FAILED: {rec.get('error')}"
        print(f"[{i}/{n}] {plan.run_id}: {msg} ({rec['timings'].get('wall_s', 0):.0f} s)", file=sys.stderr, flush=True)

    def skipped(i, n, plan, rec):
        print(f"[{i}/{n}] {plan.run_id}: already {rec['status']}, skipped (--resume)", file=sys.stderr, flush=True)

    return SweepEvents(
        run_started=started, run_progress=progress, run_finished=finished, run_skipped=skipped, run_waiting=waiting
    )
