"""`perfbench tune`: search the space of a config's sweep axes with Optuna instead of running all of it.

Each trial is a perfbench run through the sweep's pipeline (sweep.execute_run → launcher → ingest →
store) with `source: tune`; its per-step records are read while it trains and reported to Optuna's
pruner, which may stop it (status `pruned`, its steps kept). The study lives in the results folder
(`tune/<study>.db`, Optuna's RDB storage), so `--resume` continues a killed search and never re-runs a
finished trial. Cost per trial is cut where the measurements showed it goes (docs/tune.md): trials run
without the profiler (the best is re-run with it at the end), share MindSpore's graph compile cache with
earlier runs of the same configuration, and a point already measured is never launched twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from analyzers.analyses.step_metrics import WORKLOAD_COLUMNS, samples, step_series
from analyzers.catalogue import SERIES_COLUMN, WITHOUT_PROFILER
from perfbench.errors import ConfigError, UserError
from perfbench.run.config import Range, SweepConfig, plan_point, short_name
from perfbench.run.ingest import read_workload_steps
from perfbench.run.launcher import close_spare
from perfbench.run.processes import kill_stale
from perfbench.run.sweep import SweepEvents, execute_run, new_sweep_id
from perfbench.store import Store
from perfbench.tune.confirm import confirm, skip_reason
from perfbench.tune.memory import predicted_over_limit
from perfbench.tune.report import answer, best_trial, study_db
from perfbench.tune.spec import Bound, MemoryLimit, SearchSpec, default_trials, direction

#: objectives that exist per step while a run trains (from the workload's own step records), so the pruner
#: can judge a trial before it ends
LIVE_OBJECTIVES = tuple(m for m, col in SERIES_COLUMN.items() if col in WORKLOAD_COLUMNS)
#: metrics a run has without the profiler; an objective or constraint on any other metric makes every
#: trial run with the profiler
WORKLOAD_METRICS = LIVE_OBJECTIVES + WITHOUT_PROFILER


@dataclass
class TuneEvents:
    trial_started: Callable[[int, dict], None] | None = None  # (trial number, settings)
    trial_finished: Callable[[int, dict, dict], None] | None = None  # (number, settings, run record)
    trial_reused: Callable[[int, dict, int], None] | None = None  # (number, settings, earlier trial)
    finalist: Callable[[dict], None] | None = None  # settings of the best, re-run with the profiler
    confirm_started: Callable[[int, int, dict, bool], None] | None = None  # (trial, round, settings, profiled)
    confirm_finished: Callable[[int, int, dict, dict], None] | None = None  # (trial, round, settings, record)
    run_progress: Callable[[Any, int, int], None] | None = None


# ---- the space --------------------------------------------------------------------------------


def search_space(cfg: SweepConfig) -> dict[str, list | Range]:
    """Axes with more than one choice: lists are categorical, ranges numeric."""
    out: dict[str, list | Range] = {}
    for key, values in cfg.axes().items():
        if key in cfg.ranges:
            out[key] = cfg.ranges[key]
        elif len(values) > 1:
            out[key] = values
    return out


def fixed_point(cfg: SweepConfig) -> dict:
    return {k: v[0] for k, v in cfg.axes().items() if k not in cfg.ranges and len(v) == 1}


def default_point(cfg: SweepConfig) -> dict:
    """The config's first point: the first value of every axis (a range's low end)."""
    return {k: (cfg.ranges[k].low if k in cfg.ranges else v[0]) for k, v in cfg.axes().items()}


def space_size(space: dict) -> float:
    n = 1.0
    for v in space.values():
        n *= (len(v.values()) if v.enumerable else math.inf) if isinstance(v, Range) else len(v)
    return n


def _choices(values: list) -> tuple[list, bool]:
    """Optuna's categorical choices must be None/bool/int/float/str: other values go as JSON text."""
    plain = all(v is None or isinstance(v, (bool, int, float, str)) for v in values)
    return (values, False) if plain else ([json.dumps(v) for v in values], True)


def suggest(trial, space: dict) -> dict:
    point = {}
    for key, axis in space.items():
        if isinstance(axis, Range):
            if axis.is_int:
                point[key] = trial.suggest_int(key, axis.low, axis.high, step=axis.step or 1, log=axis.log)
            else:
                point[key] = trial.suggest_float(key, axis.low, axis.high, step=axis.step, log=axis.log)
        else:
            choices, encoded = _choices(axis)
            v = trial.suggest_categorical(key, choices)
            point[key] = json.loads(v) if encoded else v
    return point


def to_params(space: dict, point: dict) -> dict:
    """A point as Optuna params (for enqueueing the default point and the grid sampler)."""
    out = {}
    for key, axis in space.items():
        v = point[key]
        out[key] = json.dumps(v) if not isinstance(axis, Range) and _choices(axis)[1] else v
    return out


# ---- Optuna objects ---------------------------------------------------------------------------


def make_sampler(spec: SearchSpec, space: dict):
    import optuna

    if spec.strategy == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    if spec.strategy == "grid":
        grid = {k: (a.values() if isinstance(a, Range) else _choices(a)[0]) for k, a in space.items()}
        return optuna.samplers.GridSampler(grid, seed=spec.seed)
    return optuna.samplers.TPESampler(
        seed=spec.seed,
        n_startup_trials=spec.startup_trials,
        multivariate=True,
        constraints_func=_constraints_of if spec.constraints else None,
    )


def make_pruner(spec: SearchSpec, measured_steps: int):
    import optuna

    if spec.pruner == "none":
        return optuna.pruners.NopPruner()
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=spec.min_steps, max_resource=max(spec.min_steps, measured_steps), reduction_factor=3
        )
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=spec.min_steps, reduction_factor=3, min_early_stopping_rate=0
    )


def _constraints_of(frozen_trial) -> list[float]:
    return frozen_trial.user_attrs.get("constraints", [])


def constraint_values(spec: SearchSpec, metrics: dict) -> list[float]:
    """Optuna's convention: a value <= 0 means the constraint holds. Unknown values count as broken."""
    out = []
    for c in spec.constraints:
        if c == "loss_decreases":
            a, b = metrics.get("loss_first"), metrics.get("loss_last")
            out.append(1.0 if a is None or b is None else float(b - a))
        elif isinstance(c, MemoryLimit):
            v = metrics.get("peak_memory_bytes")
            out.append(1.0 if v is None else float(v) / 1e9 - c.peak_memory_gb)
        else:
            v = metrics.get(c.metric)
            if v is None:
                out.append(1.0)
                continue
            worst = 0.0
            if c.max is not None:
                worst = max(worst, v - c.max)
            if c.min is not None:
                worst = max(worst, c.min - v)
            out.append(worst)
    return out


# ---- live values for the pruner ---------------------------------------------------------------


class LiveObjective:
    """Called by the launcher whenever a rank finishes a step: reads the run's step records, reports the
    running median of the objective over the measured steps every rank finished (the same per-step values
    and median the run's metric is made of, analyzers.analyses.step_metrics), and asks the pruner."""

    def __init__(self, trial, metrics_dir: Path, warmup_steps: int, objective: str, min_steps: int):
        self.trial, self.metrics_dir, self.warmup = trial, metrics_dir, warmup_steps
        self.objective, self.min_steps = objective, min_steps
        self.reported = 0
        self.last_value: float | None = None
        self.decided_at: float | None = None

    def __call__(self, counts: dict[int, int]) -> str | None:
        import statistics

        if self.objective not in LIVE_OBJECTIVES:
            return None
        steps = read_workload_steps(self.metrics_dir)
        if steps.empty:
            return None
        values = samples(step_series(steps, None, None, self.warmup), self.objective)
        n = len(values)
        if n <= self.reported:
            return None
        value = float(statistics.median(values))
        self.trial.report(value, n)
        self.reported, self.last_value = n, value
        if n >= self.min_steps and self.trial.should_prune():
            self.decided_at = time.time()
            return f"pruned by the search after {n} measured steps ({self.objective} {value:.4g} so far)"
        return None


# ---- the search -------------------------------------------------------------------------------


def latest_study(store: Store, name: str) -> dict | None:
    found = [s for s in store.list_sweeps() if s.get("kind") == "tune" and s.get("name") == name]
    return max(found, key=lambda s: s.get("created", 0)) if found else None


def compile_cache_env(store: Store, plan) -> dict[str, str]:
    """MindSpore's graph compile cache, one folder per configuration (config_key + world size): a later
    run of the same configuration loads the compiled graph instead of compiling it (docs/tune.md)."""
    key = hashlib.sha1(f"{plan.config_key}-{plan.run_config['world_size']}".encode()).hexdigest()[:12]
    path = store.root / "tune" / "compile-cache" / key
    path.mkdir(parents=True, exist_ok=True)
    return {"MS_COMPILER_CACHE_ENABLE": "1", "MS_COMPILER_CACHE_PATH": str(path)}


def run_tune(cfg: SweepConfig, store: Store, *, resume: bool = False, events: TuneEvents | None = None) -> dict:
    """Run (or continue) the search; return its study record (see `summarize` for the answer)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    events = events or TuneEvents()
    spec = cfg.search or SearchSpec()
    space = search_space(cfg)
    if not space:
        raise UserError(
            f"{cfg.source or cfg.name}: nothing to tune: give at least one sweep axis with two or more values "
            "or a range {low, high}"
        )
    size = space_size(space)
    trials_budget = spec.budget.trials or default_trials(size)
    rec = _study_record(cfg, store, spec, resume)
    study_id = rec["sweep_id"]
    db = study_db(store, study_id)
    db.parent.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    measured_steps = cfg.train["steps"] - cfg.train["warmup_steps"]
    study = optuna.create_study(
        study_name=study_id,
        storage=storage,
        load_if_exists=True,
        direction=rec["direction"],
        sampler=make_sampler(spec, space),
        pruner=make_pruner(spec, measured_steps),
    )
    _abandon_unfinished(study, store)
    if not study.trials:
        study.enqueue_trial(to_params(space, default_point(cfg)))  # trial 0: the default, the gain's reference
    started = time.time()
    rec["invocations"].append({"started": started, "resume": resume})
    store.write_sweep(rec)

    deadline = started + spec.budget.minutes * 60 - rec.get("wall_s", 0.0) if spec.budget.minutes else None
    profile_trials = any(m not in WORKLOAD_METRICS for m in _metrics_needed(spec))
    fixed = fixed_point(cfg)

    def objective(trial) -> float:
        point = {**fixed, **suggest(trial, space)}
        same = _same_point(study, trial, point)
        if same is not None:  # measured already: answer from that trial, launch nothing
            trial.set_user_attr("reused", same.number)
            trial.set_user_attr("settings", point)
            if events.trial_reused:
                events.trial_reused(trial.number, point, same.number)
            if same.state == optuna.trial.TrialState.COMPLETE:
                trial.set_user_attr("constraints", same.user_attrs.get("constraints", []))
                return same.value
            if same.state == optuna.trial.TrialState.PRUNED:
                raise optuna.TrialPruned(f"same settings as pruned trial {same.number}")
            raise _TrialFailed(f"same settings as failed trial {same.number}")
        return _run_trial(trial, point, cfg, store, study_id, spec, profile_trials, events)

    def launched() -> int:
        return sum(
            1
            for t in study.trials
            if t.user_attrs.get("run_id")
            and "reused" not in t.user_attrs
            and "interrupted" not in t.user_attrs
            and t.state.is_finished()
        )

    try:
        return _search(
            study,
            objective,
            _Budget(launched, trials_budget, deadline, size),
            _Study(rec, started, store, cfg, spec, study_id, profile_trials, events),
        )
    finally:
        close_spare()


def _study_record(cfg: SweepConfig, store: Store, spec: SearchSpec, resume: bool) -> dict:
    """The study's record: the latest one of this search's name with --resume (its config unchanged), else new."""
    name = cfg.name
    rec = latest_study(store, name) if resume else None
    if resume and rec is None:
        raise UserError(f"--resume: no earlier tune of {name!r} in {store.root} to resume (run it without --resume)")
    if rec is None:
        rec = {
            "sweep_id": new_sweep_id(f"{name}-tune"),
            "kind": "tune",
            "name": name,
            "created": time.time(),
            "config": cfg.raw,
            "config_path": cfg.source,
            "runs": [],
            "invocations": [],
            "wall_s": 0.0,
            "objective": spec.objective,
            "direction": direction(spec.objective),
            "default": default_point(cfg),
        }
        while store.read_sweep(rec["sweep_id"]) is not None:
            time.sleep(1.0)
            rec["sweep_id"] = new_sweep_id(f"{name}-tune")
    elif rec.get("config") != cfg.raw:
        raise UserError(
            f"--resume: the config changed since tune {rec['sweep_id']} started; resume with the same "
            "config, or start a new search without --resume"
        )
    return rec


@dataclass
class _Budget:
    """When the search stops: trials launched against the budget, the deadline, the space's size."""

    launched: Callable[[], int]
    trials: float
    deadline: float | None
    size: float


@dataclass
class _Study:
    """What the search writes and confirms with: the study's record, the store, the sweep and search settings."""

    rec: dict
    started: float
    store: Store
    cfg: SweepConfig
    spec: SearchSpec
    study_id: str
    profile_trials: bool
    events: TuneEvents


def _search(study, objective, budget: _Budget, st: _Study) -> dict:
    launched, trials_budget, deadline, size = budget.launched, budget.trials, budget.deadline, budget.size
    rec, started, store, cfg, spec = st.rec, st.started, st.store, st.cfg, st.spec
    study_id, profile_trials, events = st.study_id, st.profile_trials, st.events
    reuses = 0
    while launched() < trials_budget and (deadline is None or time.time() < deadline):
        if _explored(study) >= size:
            break  # every point of a finite space has been measured
        before = launched()
        study.optimize(objective, n_trials=1, catch=(_TrialFailed,))
        reuses = reuses + 1 if launched() == before else 0
        if reuses >= 50:  # the sampler keeps proposing measured points: it has converged
            break
        rec["runs"] = _run_ids(study)
        rec["wall_s"] = round(rec.get("wall_s", 0.0) + time.time() - started, 3)
        started = time.time()
        store.write_sweep(rec)

    # the best few re-measured interleaved (its last round profiled): the answer does not trust one lucky run
    conf = confirm(
        study,
        cfg,
        store,
        study_id,
        spec,
        events=events,
        profile_last=spec.profile_best and cfg.profile["enabled"] and not profile_trials,
        env_for=lambda plan: compile_cache_env(store, plan) if spec.compile_cache else None,
    )
    rec["confirm"] = conf
    rec["confirm_skipped"] = skip_reason(study, spec) if conf is None else None
    picked = conf is not None and conf["pick"] is not None
    finalist = conf["profiled_run"] if picked else None
    if finalist is None:  # no confirmation, or the last round overturned the leader it profiled
        best = next(t for t in study.trials if t.number == conf["pick"]) if picked else best_trial(study)
        finalist = _finalist(best, cfg, store, study_id, spec, profile_trials, events)
    rec["finalist"] = finalist
    confirm_runs = [r for c in (conf or {}).get("candidates", []) for r in c["runs"]]
    rec["runs"] = _run_ids(study) + confirm_runs + ([finalist] if finalist and finalist not in confirm_runs else [])
    rec["wall_s"] = round(rec.get("wall_s", 0.0) + time.time() - started, 3)
    rec["invocations"][-1]["finished"] = time.time()
    rec["space_size"] = size if math.isfinite(size) else None
    rec["min_steps"] = spec.min_steps
    rec["answer"] = answer(store, rec, study)  # kept with the study for the dashboard's Tuning page
    store.write_sweep(rec)
    return rec


class _TrialFailed(Exception):
    """A trial whose run failed (or cannot run): Optuna marks it FAIL and the search goes on."""


def _metrics_needed(spec: SearchSpec) -> list[str]:
    return [spec.objective] + [c.metric for c in spec.constraints if isinstance(c, Bound)]


def _run_trial(
    trial,
    point: dict,
    cfg: SweepConfig,
    store: Store,
    study_id: str,
    spec: SearchSpec,
    profile_trials: bool,
    events: TuneEvents,
) -> float:
    import optuna

    run_id = f"{study_id}-t{trial.number:03d}-{short_name(point)}"
    trial.set_user_attr("run_id", run_id)
    trial.set_user_attr("settings", point)
    try:
        plan = plan_point(cfg, point, run_id)
    except ConfigError as exc:  # a combination the rules refuse (e.g. 1F1B with too few micro-batches)
        store.write_run(
            {
                "run_id": run_id,
                "sweep_id": study_id,
                "source": "tune",
                "status": "failed",
                "error": f"not run: {exc}",
                "settings": dict(point, workload=cfg.workload),
                "config": {},
                "timings": {},
                "metrics": {},
                "tune": {"study": study_id, "trial": trial.number},
            }
        )
        raise _TrialFailed(str(exc)) from None
    limit = spec.memory_limit_bytes()
    too_big = predicted_over_limit(store, study_id, plan.run_config, limit) if limit else None
    if too_big:  # settings predicted not to fit are not run
        trial.set_user_attr("predicted_peak_memory_bytes", too_big["peak_bytes"])
        store.write_run(
            {
                "run_id": run_id,
                "sweep_id": study_id,
                "source": "tune",
                "status": "failed",
                "error": f"not run: {too_big['reason']}",
                "settings": dict(point, workload=cfg.workload),
                "config": plan.run_config,
                "timings": {},
                "metrics": {},
                "tune": {"study": study_id, "trial": trial.number, "predicted": too_big},
            }
        )
        raise _TrialFailed(too_big["reason"])
    # trials run without the profiler, except the default (trial 0): the reference the best is explained against
    keep_profile = profile_trials or (trial.number == 0 and spec.profile_best)
    if not keep_profile:
        plan.run_config["profile"] = dict(plan.run_config["profile"], enabled=False)
    if events.trial_started:
        events.trial_started(trial.number, point)
    store.reset_run(run_id)
    live = LiveObjective(
        trial, store.artifacts_dir(run_id) / "metrics", cfg.train["warmup_steps"], spec.objective, spec.min_steps
    )
    record = _run_point(cfg, store, study_id, plan, spec, events, {"study": study_id, "trial": trial.number}, live)
    if live.decided_at is not None:
        record["tune"]["pruned_at"] = live.decided_at
        record["tune"]["stopped_s"] = round(record["timings"]["finished"] - live.decided_at, 3)
        store.write_run(record)
    if events.trial_finished:
        events.trial_finished(trial.number, point, record)
    if record["status"] == "pruned":
        raise optuna.TrialPruned(record.get("error"))
    value = (record.get("metrics") or {}).get(spec.objective)
    if record["status"] != "ok" or value is None or (isinstance(value, float) and math.isnan(value)):
        raise _TrialFailed(record.get("error") or f"the run has no {spec.objective}")
    trial.set_user_attr("constraints", constraint_values(spec, record["metrics"]))
    return float(value)


def _run_point(cfg, store, study_id, plan, spec, events, tune: dict, stop=None) -> dict:
    """A point of the search as a sweep run of the study (source "tune", the record's `tune` section, the compile
    cache when the search asks for it); the study tears the last run down itself."""
    env = compile_cache_env(store, plan) if spec.compile_cache else None
    return execute_run(
        cfg,
        store,
        study_id,
        plan,
        SweepEvents(run_progress=events.run_progress),
        source="tune",
        stop=stop,
        env_extra=env,
        extra={"tune": tune},
        skip_teardown=True,
    )


def _finalist(best, cfg, store, study_id, spec, profile_trials, events) -> str | None:
    """Re-run the best trial with the profiler (trials ran without it), so that the analyzers can explain
    why it beats the default. Skipped when trials were profiled or the config disables profiling."""
    if best is None or profile_trials or not spec.profile_best or not cfg.profile["enabled"]:
        return None
    point = best.user_attrs["settings"]
    run_id = f"{study_id}-best-{short_name(point)}"
    done = store.read_run(run_id)
    if done and done.get("status") == "ok" and done.get("tune", {}).get("of_trial") == best.number:
        return run_id
    plan = plan_point(cfg, point, run_id)
    if events.finalist:
        events.finalist(point)
    store.reset_run(run_id)
    tune = {"study": study_id, "of_trial": best.number, "finalist": True}
    record = _run_point(cfg, store, study_id, plan, spec, events, tune)
    return run_id if record["status"] == "ok" else None


def _same_point(study, trial, point: dict):
    for t in study.trials:
        if (
            t.number != trial.number
            and t.state.is_finished()
            and "reused" not in t.user_attrs
            and "interrupted" not in t.user_attrs
            and t.user_attrs.get("settings") == point
        ):
            return t
    return None


def _explored(study) -> int:
    return len(
        {
            json.dumps(t.user_attrs.get("settings"), sort_keys=True, default=str)
            for t in study.trials
            if t.state.is_finished() and t.user_attrs.get("settings") is not None and "interrupted" not in t.user_attrs
        }
    )


def _run_ids(study) -> list[str]:
    return [t.user_attrs["run_id"] for t in study.trials if t.user_attrs.get("run_id") and "reused" not in t.user_attrs]


def _abandon_unfinished(study, store: Store) -> None:
    """Trials left RUNNING by a killed `tune`: kill what is left of their run, keep the run as failed
    ("interrupted"), mark the trial failed and queue its point again. An interrupted trial neither counts
    against the budget nor stands for its point."""
    import optuna

    for t in study.trials:
        if t.state != optuna.trial.TrialState.RUNNING:
            continue
        rid = t.user_attrs.get("run_id")
        if rid:
            kill_stale(rid)
            run = store.read_run(rid)
            if run and run.get("status") == "running":
                run.update(status="failed", error="interrupted: `perfbench tune` was stopped while this trial ran")
                store.write_run(run)
        study._storage.set_trial_user_attr(t._trial_id, "interrupted", True)
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params)  # measure the point it did not finish first
