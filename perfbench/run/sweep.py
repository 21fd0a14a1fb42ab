"""A sweep end to end: plan the runs, launch each through msrun, ingest its artifacts, store it.

A run that fails (crash, hang, timeout) is recorded as failed with its reason and the sweep goes on.
Each run is committed to the store on its own, so an interrupted sweep keeps every finished run and
`--resume` re-runs only the runs that did not finish.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from perfbench import __version__
from perfbench.errors import UserError
from perfbench.run.config import RunPlan, SweepConfig
from perfbench.run.ingest import ingest_run, read_meta
from perfbench.run.launcher import close_spare, launch, pins_single_rank, should_bind, threads_per_rank, write_json
from perfbench.run.processes import kill_stale
from perfbench.run.slurm import job_info, launch_slurm, slurm_tool
from perfbench.store import FINISHED, Store


@dataclass
class SweepEvents:
    """Callbacks for progress display; all optional."""

    run_started: Callable[[int, int, RunPlan], None] | None = None
    run_progress: Callable[[RunPlan, int, int], None] | None = None  # (plan, steps done over ranks, total)
    run_finished: Callable[[int, int, RunPlan, dict], None] | None = None
    run_skipped: Callable[[int, int, RunPlan, dict], None] | None = None
    run_waiting: Callable[[RunPlan, str], None] | None = None  # (plan, e.g. "Slurm job 12 PENDING (Resources)")


def environment(threads: int, bind: bool) -> dict:
    try:
        from importlib.metadata import version

        ms_version = version("mindspore")
    except Exception:
        ms_version = None
    return {
        "perfbench": __version__,
        "mindspore": ms_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "threads_per_rank": threads,
        "bind_core": bind,
    }


def new_sweep_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def latest_sweep(store: Store, name: str) -> dict | None:
    sweeps = [s for s in store.list_sweeps() if s.get("name") == name]
    return max(sweeps, key=lambda s: s.get("created", 0)) if sweeps else None


def run_sweep(
    cfg: SweepConfig,
    store: Store,
    *,
    resume: bool = False,
    retry_failed: bool = False,
    events: SweepEvents | None = None,
) -> dict:
    events = events or SweepEvents()
    if cfg.launch["backend"] == "slurm":  # before anything is written: a clear error where Slurm is missing
        for tool in ("sbatch", "scontrol", "scancel"):
            slurm_tool(tool)
    sweep = latest_sweep(store, cfg.name) if resume else None
    if resume and sweep is None:
        raise UserError(
            f"--resume: no earlier sweep named {cfg.name!r} in {store.root} to resume (run it without --resume)"
        )
    if sweep is None:
        sweep = {
            "sweep_id": new_sweep_id(cfg.name),
            "name": cfg.name,
            "created": time.time(),
            "config": cfg.raw,
            "config_path": cfg.source,
            "runs": [],
            "invocations": [],
        }
        while store.read_sweep(sweep["sweep_id"]) is not None:  # two sweeps started within a second
            time.sleep(1.0)
            sweep["sweep_id"] = new_sweep_id(cfg.name)
    elif sweep.get("config") != cfg.raw:
        raise UserError(
            f"--resume: the config changed since sweep {sweep['sweep_id']} started; "
            "resume with the same config, or start a new sweep without --resume"
        )
    plans = cfg.plan(sweep["sweep_id"])
    sweep["runs"] = [p.run_id for p in plans]
    sweep["invocations"].append({"started": time.time(), "resume": resume, "argv": sys.argv[1:]})
    store.write_sweep(sweep)

    try:
        _run_plans(cfg, store, sweep, plans, resume, retry_failed, events)
    finally:
        close_spare()
    sweep["invocations"][-1]["finished"] = time.time()
    store.write_sweep(sweep)
    return sweep


def _run_plans(cfg, store, sweep, plans, resume, retry_failed, events) -> None:
    total = len(plans)
    for i, plan in enumerate(plans, 1):
        existing = store.read_run(plan.run_id)
        if existing and existing["status"] in FINISHED and not (retry_failed and existing["status"] == "failed"):
            if events.run_skipped:
                events.run_skipped(i, total, plan, existing)
            continue
        job = live_slurm_job(existing) if resume and cfg.launch["backend"] == "slurm" else None
        resume_at = None
        if job is None:  # a job still queued or running under Slurm is followed again, not started twice
            kill_stale(plan.run_id)
            resume_at = checkpoint_resume_step(store, plan, existing, cfg.launch["nodes"]) if resume else None
            if resume_at is None:
                store.reset_run(plan.run_id)
        if events.run_started:
            events.run_started(i, total, plan)
        record = execute_run(
            cfg, store, sweep["sweep_id"], plan, events, resume_from=resume_at, attach=existing if job else None
        )
        if events.run_finished:
            events.run_finished(i, total, plan, record)


def execute_run(
    cfg: SweepConfig,
    store: Store,
    sweep_id: str,
    plan: RunPlan,
    events: SweepEvents,
    *,
    source: str = "sweep",
    stop=None,
    env_extra: dict | None = None,
    extra: dict | None = None,
    skip_teardown: bool = False,
    resume_from: int | None = None,
    attach: dict | None = None,
) -> dict:
    """Launch one planned run, ingest what it left and store it. `stop` (see launcher.launch) may end it
    early: the run is then kept with status "pruned" and the steps it finished. `extra` keys are added to
    the run record (e.g. `tune`: the study and trial). `attach`: the record of a run whose Slurm job was
    submitted earlier (launch.backend slurm, `--resume`): follow that job instead of starting the run."""
    art = store.artifacts_dir(plan.run_id)
    record, rc = _new_record(cfg, sweep_id, plan, art, source, extra)
    if resume_from:  # continue from the last checkpoint: the records of the steps after it are dropped
        rc["resume"] = {"step": resume_from}
        record["resumed_from_step"] = resume_from
        keep_steps_before(art / "metrics", resume_from)
    config_path = art / "run_config.json"
    if attach is not None:  # the job already has its run_config.json and record
        record, rc = attach, attach["config"]
        record["reattached"] = record.get("reattached", 0) + 1
    else:
        write_json(config_path, rc)
    store.write_run(record)
    try:
        result = _launch(
            cfg,
            store,
            plan,
            events,
            (config_path, rc, record),
            stop=stop,
            env_extra=env_extra,
            skip_teardown=skip_teardown,
            attach=attach,
        )
    except KeyboardInterrupt:
        record["status"] = "running"  # not finished: --resume runs it again
        record["error"] = "interrupted"
        store.write_run(record)
        raise
    _store_outcome(store, plan, (art, rc, record), result)
    return record


def _new_record(
    cfg: SweepConfig, sweep_id: str, plan: RunPlan, art: Path, source: str, extra: dict | None
) -> tuple[dict, dict]:
    """(the run record, status running; the run config its ranks read, with its output folder and threads)."""
    rc = dict(plan.run_config)
    local = rc["world_size"] // cfg.launch["nodes"]
    rc["output_dir"] = str(art)
    cpus = cfg.launch["slurm"]["cpus_per_task"] if cfg.launch["backend"] == "slurm" else None
    bind = should_bind(cfg.launch["bind_core"], local)
    one = cfg.launch["backend"] == "local" and pins_single_rank(bind, local)
    rc["threads_per_rank"] = 1 if one else threads_per_rank(local, cpus)
    record = {
        "run_id": plan.run_id,
        "sweep_id": sweep_id,
        "source": source,
        "status": "running",
        "error": None,
        "settings": plan.settings,
        "config_key": plan.config_key,
        "config": rc,
        "env": environment(rc["threads_per_rank"], bind),
        "timings": {"started": time.time()},
        "metrics": {},
        **(extra or {}),
    }
    return record, rc


def _launch(
    cfg: SweepConfig,
    store: Store,
    plan: RunPlan,
    events: SweepEvents,
    run: tuple[Path, dict, dict],
    *,
    stop,
    env_extra: dict | None,
    skip_teardown: bool,
    attach: dict | None,
):
    """The run (`run`: its run_config.json, run config and record) launched here, or as a Slurm job (followed again
    when `attach` names one), with the sweep's events told of its progress."""
    config_path, rc, record = run
    slurm = cfg.launch["backend"] == "slurm"
    # a Slurm job's ranks run on every node and write into the shared folder: follow all of them
    total_steps = rc["train"]["steps"] * (rc["world_size"] if slurm else rc["world_size"] // cfg.launch["nodes"])

    def progress(counts: dict[int, int]) -> None:
        if events.run_progress:
            events.run_progress(plan, sum(counts.values()), total_steps)

    def submitted(job_id: str) -> None:  # stored at once: `--resume` re-attaches to it
        record["slurm"] = {"job_id": job_id}
        store.write_run(record)

    def waiting(text: str) -> None:
        if events.run_waiting:
            events.run_waiting(plan, text)

    if slurm:
        return launch_slurm(
            config_path,
            rc,
            cfg.launch,
            on_progress=progress,
            on_state=waiting,
            on_submit=submitted,
            stop=stop,
            env_extra=env_extra,
            job_id=(attach or {}).get("slurm", {}).get("job_id"),
        )
    return launch(
        config_path,
        rc,
        cfg.launch,
        on_progress=progress,
        stop=stop,
        env_extra=env_extra,
        skip_teardown=skip_teardown,
        warm=warm_msrun() and cfg.launch["nodes"] == 1,
    )


def _store_outcome(store: Store, plan: RunPlan, run: tuple[Path, dict, dict], result) -> None:
    """The launch, the ingested metrics and the status (ok, pruned, failed with its rank and log) into the run's
    record (`run`: its artifacts folder, run config and record), stored."""
    art, rc, record = run
    record["launch"] = {
        "command": result.command,
        "master_port": result.master_port,
        "returncode": result.returncode,
        "bind_core": result.bind_core,
        "wall_s": round(result.wall_s, 3),
        "teardown_skipped": result.teardown_skipped,
        "startup": result.startup,
        "teardown_error": result.teardown_error,
    }
    if result.slurm:
        record["slurm"] = result.slurm
    metrics, warnings = ingest_run(store, plan.run_id, rc)
    record["metrics"] = metrics
    if rc.get("workload") == "script":
        warnings = warnings + script_capture(record, art / "metrics")
    if warnings:
        record["warnings"] = warnings
    if result.status == "ok":
        record["status"] = "ok"
    elif result.status == "stopped":
        record["status"] = "pruned"
        record["error"] = result.reason
    else:
        record["status"] = "failed"
        record["error"] = result.reason
        record["failed_rank"] = result.failed_rank
        record["log_tail"] = result.log_tail
    record["timings"]["finished"] = time.time()
    record["timings"]["wall_s"] = round(record["timings"]["finished"] - record["timings"]["started"], 3)
    store.write_run(record)


def script_capture(record: dict, metrics_dir: Path) -> list[str]:
    """workload script: how its steps were found (record["capture"]) and, when none were, why (a warning)."""

    meta = read_meta(metrics_dir)
    m0 = meta.get(0) or next(iter(meta.values()), {})
    record["capture"] = {
        "framework": (record["config"].get("script") or {}).get("framework"),
        "mode": m0.get("capture"),
        "samples_source": m0.get("samples_source"),
        "steps_per_rank": {str(r): m.get("recorded_steps") for r, m in sorted(meta.items())},
    }
    if record["config"]["script"].get("framework") == "pytorch":
        try:
            from importlib.metadata import version

            record["env"]["torch"] = version("torch")
        except Exception:  # noqa: BLE001 - unknown, not a failure
            record["env"]["torch"] = None
    reason = m0.get("no_steps_reason") if meta else "no rank wrote its meta (the script never started capture)"
    if reason and not any(m.get("recorded_steps") for m in meta.values()):
        record["no_steps_reason"] = reason
        return [f"no steps recorded (wall time {record['launch']['wall_s']:.1f} s only): {reason}"]
    return []


def live_slurm_job(existing: dict | None) -> str | None:
    """The Slurm job of an unfinished run that Slurm still knows (queued, running, or ended while no sweep
    followed it: its outcome is then collected instead of running it again)."""
    job_id = ((existing or {}).get("slurm") or {}).get("job_id")
    if not job_id or existing.get("status") in FINISHED:
        return None

    info = job_info(job_id)
    if info is None or info.state == "CANCELLED":  # cancelled (Ctrl-C, timeout): run it again
        return None
    return job_id


def warm_msrun() -> bool:
    """Runs of a sweep or search start msrun in a spare started ahead with msrun imported (launcher._Spare);
    PERFBENCH_WARM_MSRUN=0 starts a fresh msrun for every run (how it was before; bench/bench_trial_startup.py)."""
    return os.environ.get("PERFBENCH_WARM_MSRUN", "1") != "0"


def checkpoint_resume_step(store: Store, plan: RunPlan, existing: dict | None, nodes: int) -> int | None:
    """The step an unfinished run continues from under `--resume`: one past the newest checkpoint every
    local rank wrote (workloads.runner.Checkpoints); None when there is none (it then re-runs from step 0)."""
    train = plan.run_config["train"]
    if not existing or existing.get("status") in FINISHED or not train.get("checkpoint_every"):
        return None
    ckdir = store.run_dir(plan.run_id) / "artifacts" / "checkpoints"
    local = plan.run_config["world_size"] // nodes
    steps_by_rank = [{int(f.stem.split("-step")[1]) for f in ckdir.glob(f"rank{r}-step*.ckpt")} for r in range(local)]
    common = set.intersection(*steps_by_rank) if steps_by_rank else set()
    last = max(common, default=None)
    return last + 1 if last is not None and last + 1 < int(train["steps"]) else None


def keep_steps_before(metrics_dir: Path, step: int) -> None:
    """Drop step and span records of steps >= `step` (they are run again after a resume)."""
    import json

    for f in list(metrics_dir.glob("rank*.steps.jsonl")) + list(metrics_dir.glob("rank*.spans.jsonl")):
        kept = []
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the line a killed rank was writing
            if rec.get("step") is not None and rec["step"] < step:
                kept.append(line)
        write_text = f.with_suffix(".tmp")
        write_text.write_text("".join(k + "\n" for k in kept))
        os.replace(write_text, f)


def resolve_results_dir(cli_value: str, cfg: SweepConfig | None, cli_given: bool) -> Path:
    """--results on the command line wins; else `results:` in the config (relative to the config file)."""
    if not cli_given and cfg is not None and cfg.results:
        base = Path(cfg.source).parent if cfg.source else Path.cwd()
        return (base / cfg.results).resolve()
    return Path(cli_value).resolve()
