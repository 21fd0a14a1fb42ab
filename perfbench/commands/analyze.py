"""`perfbench analyze PATH`: import a profiler output (one rank or a whole cluster) as a run in the store
and print its summary: step breakdown per rank, collectives, slow ranks, advice."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
from pathlib import Path

from perfbench import __version__
from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "analyze",
        help="import and analyze a profiler output (Ascend text/db, msprof, legacy MindSpore)",
        description="Read a profiler output folder (one rank's folder, or a folder holding many ranks: it is walked), "
        "compute the step breakdown, kernel and collective statistics, slow ranks and advice, store it "
        "as a run (source: analyze) so compare/check/dashboard work on it, and print the summary.",
    )
    p.add_argument("path", help="profiler output folder (e.g. a *_ascend_ms / *_ascend_pt folder, or their parent)")
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument("--out", metavar="DIR", help="also write analysis.json and one CSV per table into DIR")
    p.add_argument("--run-id", help="run id to store the import under (default: analyze-<folder>-<hash>)")
    p.add_argument("--no-store", action="store_true", help="do not write the run into the results store")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes parsing the ranks (default: 1 up to a few hundred light ranks, then one per ~400 "
        "ranks up to the number of CPUs, ranks with kernels or memory files counting more: 2 processes from "
        "48 ranks with memory files; 1 = parse in this process)",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="show 'ranks parsed / total' on stderr while the ranks are read: auto (default) = when "
        "stderr is a terminal, the folder holds at least 64 ranks and --json is not given",
    )
    p.add_argument(
        "--trace",
        choices=("auto", "always", "never"),
        default="auto",
        help="read trace_view.json for host step starts (Preparing) and collective sizes: "
        "auto = only files up to 512 MB (default)",
    )
    p.add_argument(
        "--kernels",
        choices=("auto", "all", "none"),
        default="auto",
        help="which ranks' kernels (kernel_details.csv, trace_view.json, the profiler db) to read: the "
        "profiler's step trace is the breakdown and the kernels its cross-check and the kernel "
        "tables. auto (default): every rank up to 2 ranks; in larger clusters with --detail all the first and "
        "the last rank plus every rank without a step trace, in summary mode only the ranks without a step "
        "trace. all: every rank. none: only ranks without a step trace",
    )
    p.add_argument(
        "--detail",
        choices=("auto", "all", "summary"),
        default="auto",
        help="per-rank memory detail (each rank's memory timeline, the allocations live at its peak, what holds "
        "the peak): all = computed for every rank at import; summary = each rank's memory_record.csv reduced to "
        "its peaks while read (the other memory files not read), the detail computed on demand by `perfbench "
        "show RUN --rank R`; auto (default) = all up to 8 ranks, summary above",
    )
    p.add_argument(
        "--hardware",
        metavar="NAME",
        help="hardware profile (perfbench/predict/hardware/*.yaml name, or a YAML path) whose "
        "device_memory_bytes is each device's capacity for memory_headroom, e.g. ascend910 "
        "(32 GiB); without it an imported profile's headroom is unknown (null)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="treat any warning (a missing or damaged file on some rank, a rank that cannot be read) "
        "as an error: exit 2. Without it every rank is analyzed with what it has and the "
        'warnings are printed (and listed under "warnings" in --json)',
    )
    p.set_defaults(func=run)


def _run_id(path: Path) -> str:
    h = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:6]
    name = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in path.resolve().name)[:40] or "profile"
    return f"analyze-{name}-{h}"


def run(args) -> int:
    import analyzers
    from analyzers.report import build_document, dumps_bytes, write_document
    from perfbench.run.ingest import store_analysis
    from perfbench.store import Store, atomic_write_bytes

    path = Path(args.path)
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    t0 = time.time()
    read_trace = {"auto": "auto", "always": True, "never": False}[args.trace]
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers}: expected a number of processes >= 1")
    progress = Progress(getattr(args, "progress", "auto"), quiet=bool(args.json))
    try:
        profile = analyzers.load_profile(
            path,
            workers=args.workers,
            read_trace=read_trace,
            strict=getattr(args, "strict", False),
            kernels=getattr(args, "kernels", "auto"),
            progress=progress,
            detail=getattr(args, "detail", "auto"),
        )
    finally:
        progress.close()
    run_id = args.run_id or _run_id(path)
    store = None
    if not args.no_store:
        store = Store(args.results)
        store.reset_run(run_id)
    hw = getattr(args, "hardware", None)
    hw_config = None
    if hw:
        from perfbench.predict.hardware import load

        capacity = load(hw).device_memory_bytes  # a wrong name is a user error before anything is stored
        hw_config = {"hardware": hw, "device_memory_bytes": float(capacity) if capacity else None}
    analysis = store_analysis(store, run_id, profile, None, None, hw_config)
    doc = build_document(profile, analysis)
    wall = time.time() - t0
    doc["run_id"] = None if args.no_store else run_id

    if store is not None:
        n_ranks = int(profile.ranks["rank"].nunique()) if len(profile.ranks) else doc["source"]["ranks"]
        record = {
            "run_id": run_id,
            "sweep_id": None,
            "source": "analyze",
            "status": "ok",
            "error": None,
            "settings": {"workload": _workload(profile), "world_size": n_ranks, "repeat": 0},
            "config": {
                "path": str(path.resolve()),
                "format": profile.source,
                "producer": profile.meta.get("producer"),
                **(hw_config or {}),
            },
            "env": {
                "perfbench": _version(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "host": platform.node(),
            },
            "timings": {"started": t0, "finished": time.time(), "wall_s": wall},
            "metrics": dict(analysis.summary),
            "warnings": list(analysis.warnings),
            # per rank: the inputs it had but could not use, and what was recomputed instead (show, the Run page)
            "input_problems": [
                {"rank": r["rank"], **p, "recomputed": r.get("recomputed")}
                for r in doc["ranks"]
                for p in r.get("input_problems") or []
            ],
            "skipped_analyses": dict(analysis.skipped),
        }
        store.write_run(record)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out / "analysis.json", dumps_bytes(doc, newline=True))
        for name, df in analysis.tables.items():
            if df is not None and len(df):
                df.to_csv(out / f"{name}.csv", index=False)
    for w in doc.get("warnings") or []:
        sys.stderr.write(f"perfbench: warning: {w}\n")
    if args.json:
        binary = getattr(sys.stdout, "buffer", None)
        if binary is None:  # a text stream (captured output)
            sys.stdout.write(dumps_bytes(doc, newline=True).decode())
            return 0
        sys.stdout.flush()  # the document's bytes straight to the binary stream, a key at a time (no str copy)
        write_document(doc, binary)
        binary.flush()
        return 0
    _print(doc, analysis, wall, None if args.no_store else (run_id, args.results))
    return 0


class Progress:
    """'perfbench: ranks parsed 512/1024' on stderr while a cluster is read (one line, rewritten in place on a
    terminal, at most every 0.2 s). Never on stdout, so `--json` output stays one document."""

    MIN_RANKS = 64

    def __init__(self, mode: str = "auto", *, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.mode = mode
        self.on = mode == "always" or (mode == "auto" and tty and not quiet)
        self.tty = tty
        self.last = 0.0
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.on or (self.mode == "auto" and total < self.MIN_RANKS):
            return
        now = time.monotonic()
        if done < total and now - self.last < 0.2:
            return
        self.last = now
        line = f"perfbench: ranks parsed {done}/{total}"
        self.stream.write(f"\r{line}" if self.tty else f"{line}\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _workload(profile) -> str:
    src = profile.source or "profile"
    if src.startswith("ascend"):
        return "ascend-import"
    return f"{src}-import"


def _version() -> str:
    return __version__


def _ms(v):
    return "-" if v is None else f"{v / 1000:.3f}"


def _print(doc: dict, analysis, wall: float, stored) -> None:
    from perfbench.views.results import console
    from perfbench.views.run_report import traffic_class_section

    c = console()
    _print_breakdown(c, doc, wall)
    _print_provenance(c, doc, analysis)
    _print_collective_types(c, analysis)
    traffic_class_section(c, analysis.tables, "collectives by traffic class (per rank and step, mean)")
    _print_kernels_and_stages(c, doc, analysis)
    _print_slow_ranks_and_advice(c, doc, stored)


def _print_breakdown(c, doc: dict, wall: float) -> None:
    """The source line and the step breakdown per rank."""
    from perfbench.views.results import grid

    s = doc["summary"]
    src = doc["source"]
    c.print(
        f"[bold]{src['path']}[/bold]  format: {src['format']}  ranks: {src['ranks']}  steps: {s.get('steps')}  "
        f"({wall:.2f} s)"
    )
    staged = any(r.get("stage") is not None for r in doc["ranks"])
    heads = ["rank", *(("stage",) if staged else ()), "steps", "step", "compute", "exposed comm", "free", "overlap"]
    heads.append("preparing")
    rows = []
    for r in doc["ranks"]:
        st = r["steps"]

        def m(k):
            vals = [x[k] for x in st if x.get(k) is not None]
            return sum(vals) / len(vals) if vals else None

        rows.append(
            [
                str(r["rank"]),
                *((str(r["stage"]) if r.get("stage") is not None else "-",) if staged else ()),
                str(len(st)),
                _ms(m("step_us")),
                _ms(m("computing_us")),
                _ms(m("communication_not_overlapped_us")),
                _ms(m("free_us")),
                _ms(m("overlapped_us")),
                _ms(m("preparing_us")),
            ]
        )
    t = grid("step breakdown per rank (ms; mean over steps; overlap lies within compute)", heads, rows, c.width, left=0)
    c.print(t)


def _print_provenance(c, doc: dict, analysis) -> None:
    """Where each rank's numbers come from: inputs, damaged files, the breakdown's source, its cross-checks."""
    src = doc["source"]
    sets = {tuple(r.get("inputs") or []) for r in doc["ranks"]}
    if len(sets) == 1 and sets != {()}:
        c.print(f"inputs (every rank): {', '.join(next(iter(sets)))}")
    elif len(sets) > 1:
        for r in doc["ranks"]:
            c.print(f"inputs of rank {r['rank']}: {', '.join(r.get('inputs') or []) or '-'}")
    bad = [r for r in doc["ranks"] if r.get("input_problems")]
    for r in bad:
        files = ", ".join(f"{p['file']} {p['problem']}" for p in r["input_problems"])
        c.print(
            f"[yellow]rank {r['rank']}: {files}[/yellow]" + (f"; {r['recomputed']}" if r.get("recomputed") else ""),
            highlight=False,
        )
    own = [r["rank"] for r in doc["ranks"] if r.get("breakdown_source") == "profiler"]
    redone = [r["rank"] for r in doc["ranks"] if r.get("breakdown_source") == "recomputed"]
    if src.get("reference") and own and not redone:
        c.print(f"breakdown: the profiler's own, from {_reference_label(src)}")
    elif own and redone:
        c.print(
            f"breakdown: the profiler's own ({_reference_label(src)}) on {_ranks(own)}; recomputed from the "
            f"kernels on {_ranks(redone)}"
        )
    rec = analysis.tables.get("reconciliation")
    if rec is not None and len(rec):
        c.print(
            f"reconciliation with the profiler's own breakdown ({_reference_label(src)}): "
            f"max |diff| {rec['diff_us'].abs().max():.2f} us ({rec['rel_diff'].abs().max() * 100:.4f}% of step)"
        )
    cc = analysis.tables.get("cluster_check")
    if cc is not None and len(cc):
        for kind, g in cc.groupby("kind"):
            c.print(
                f"cross-check with msprof-analyze's output ({g['source'].iloc[0]}), {kind}: {len(g)} numbers, "
                f"max |rel diff| {g['rel_diff'].abs().max() * 100:.4f}%"
            )


def _print_collective_types(c, analysis) -> None:
    from rich.table import Table

    ct = analysis.tables.get("comm_types")
    if ct is not None and len(ct):
        t = Table(title="collectives by type")
        for col in ("type", "count", "total ms", "mean ms", "wait ratio", "busbw GB/s"):
            t.add_column(col, justify="right")
        for row in ct.itertuples(index=False):
            t.add_row(
                str(row.op_type),
                str(row.count),
                f"{row.elapse_ms_total:.3f}",
                f"{row.elapse_ms_mean:.3f}",
                "-" if row.wait_ratio_mean != row.wait_ratio_mean else f"{row.wait_ratio_mean:.2f}",
                "-" if row.busbw_gbps_mean != row.busbw_gbps_mean else f"{row.busbw_gbps_mean:.2f}",
            )
        c.print(t)


def _print_kernels_and_stages(c, doc: dict, analysis) -> None:
    from rich.table import Table

    k = analysis.tables.get("kernels")
    if k is not None and len(k):
        t = Table(title="top kernel types by time")
        for col in ("type", "core", "count", "total ms", "share"):
            t.add_column(col, justify="right")
        for row in k.head(8).itertuples(index=False):
            t.add_row(
                str(row.type)[:40],
                str(row.core_type),
                str(row.count),
                f"{row.total_us / 1000:.3f}",
                f"{row.share * 100:.1f}%",
            )
        c.print(t)
    if doc.get("stages"):
        t = Table(title="pipeline stages (ms per step; mean over the stage's ranks)")
        for col in ("stage", "ranks", "computing", "x least", "comm (not overlapped)", "bubble"):
            t.add_column(col, justify="right")
        for row in doc["stages"]:
            t.add_row(
                str(row["stage"]),
                str(row["ranks"]),
                _ms1(row.get("computing_ms")),
                "-" if row.get("computing_ratio") is None else f"{row['computing_ratio']:.2f}",
                _ms1(row.get("communication_not_overlapped_ms")),
                _ms1(row.get("bubble_ms")),
            )
        c.print(t)


def _print_slow_ranks_and_advice(c, doc: dict, stored) -> None:
    s = doc["summary"]
    slow = [r for r in doc["slow_ranks"] if r.get("slow") and r.get("scope", "group") == "group"]
    c.print("slow ranks: " + (", ".join(f"rank {r['rank']} ({r.get('group')})" for r in slow) if slow else "none"))
    if doc["advice"]:
        from perfbench.views.advice import print_advice

        c.print("[bold]advice[/bold], largest expected gain first (symptoms under their cause):")
        print_advice(c, [dict(a, symptom_of=a.get("symptom_of")) for a in doc["advice"]])
    c.print(f"kernel utilization {_pct(s.get('kernel_utilization'))}, comm share {_pct(s.get('comm_share'))}")
    if stored:
        c.print(f"stored as run [bold]{stored[0]}[/bold] in {stored[1]} (see `perfbench show {stored[0]}`)")


def _ranks(ranks: list) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def _ms1(v):
    return "-" if v is None else f"{v:.3f}"


def _reference_label(src: dict) -> str:
    """What the profiler's own breakdown was read from (step_trace_time.csv, analysis.db StepTraceTime,
    msprof-analyze's cluster files, the legacy cluster analysis files...)."""
    return ", ".join(src.get("reference") or []) or "the profiler's step trace"


def _pct(v):
    return "-" if v is None else f"{v * 100:.1f}%"
