"""The answer of a search, from its study and its stored runs: the best settings and their gain over the
default, every trial, each axis's importance (Optuna's PED-ANOVA evaluator), the optimization history,
where the wall time went, and why the best beats the default (perfbench.regress.compare on the two runs).

`answer()` is what `perfbench tune --json` prints and what the study record keeps for the dashboard's
Tuning page (views read it from the store; they do not open the Optuna database)."""

from __future__ import annotations

import math
from pathlib import Path

from perfbench.store import Store

_STATE = {"COMPLETE": "ok", "PRUNED": "pruned", "FAIL": "failed"}


def study_db(store: Store, study_id: str) -> Path:
    """The study's Optuna database (written by perfbench.tune.search, read here)."""
    return store.root / "tune" / f"{study_id}.db"


def best_trial(study):
    """The best finished trial that keeps every constraint (None when there is none)."""
    import optuna

    ok = [
        t
        for t in study.trials
        if t.state == optuna.trial.TrialState.COMPLETE
        and "reused" not in t.user_attrs
        and all(c <= 0 for c in t.user_attrs.get("constraints", []))
    ]
    if not ok:
        return None
    pick = max if study.direction == optuna.study.StudyDirection.MAXIMIZE else min
    return pick(ok, key=lambda t: t.value)


def load_study(store: Store, rec: dict):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{study_db(store, rec['sweep_id'])}")
    return optuna.load_study(study_name=rec["sweep_id"], storage=storage)


def _steps_done(store: Store, run_id: str) -> int:
    """Steps every rank finished (warm-up included)."""
    ws = store.read_table(run_id, "workload_steps")
    if ws is None or ws.empty:
        return 0
    per = ws.groupby("step")["rank"].nunique()
    return int((per == ws["rank"].nunique()).sum())


def importance(study, min_steps: int | None = None) -> tuple[dict[str, float], str | None]:
    """Each searched axis's share of the objective's variation among good trials (Optuna's PED-ANOVA:
    works with the few trials a search has and needs no extra package). Pruned trials count too: every
    measured trial enters with its value at the first rung (`min_steps` measured steps, the live running
    median the pruner judged), a trial that finished before reporting there with its final value.
    ({}, reason) when it cannot be judged."""
    import optuna

    points = []
    for t in study.trials:
        if "reused" in t.user_attrs or t.state not in (
            optuna.trial.TrialState.COMPLETE,
            optuna.trial.TrialState.PRUNED,
        ):
            continue
        iv = t.intermediate_values
        value = iv.get(min_steps) if min_steps is not None and iv.get(min_steps) is not None else t.value
        if value is None and iv:
            value = iv[max(iv)]
        if value is not None:
            points.append((t, float(value)))
    names = sorted({k for t, _ in points for k in t.params})
    varied = [k for k in names if len({str(t.params.get(k)) for t, _ in points}) > 1]
    if len(points) < 3 or not varied:
        return {}, f"needs at least 3 measured trials that differ (has {len(points)})"
    sub = optuna.create_study(direction=study.direction)
    sub.add_trials(
        [optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=v) for t, v in points]
    )
    imp = optuna.importance.get_param_importances(
        sub, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), params=varied
    )
    return {k: float(v) for k, v in imp.items()}, None


def wall_split(store: Store, run_ids: list[str], wall_s: float) -> dict:
    """Where the search's wall time went: its runs' start-up (launch to first step), training steps, and
    after (profiler output, exit, ingest); `training_share` = training steps / the whole search's wall."""
    startup = training = after = runs = 0.0
    for rid in run_ids:
        rec = store.read_run(rid)
        ws = store.read_table(rid, "workload_steps")
        t = (rec or {}).get("timings") or {}
        if not t.get("finished") or ws is None or ws.empty:
            continue
        first, last = float(ws["start_ts"].min()), float(ws["end_ts"].max())
        startup += first - t["started"]
        training += last - first
        after += t["finished"] - last
        runs += t["finished"] - t["started"]
    return {
        "wall_s": round(wall_s, 1),
        "runs_wall_s": round(runs, 1),
        "startup_s": round(startup, 1),
        "training_s": round(training, 1),
        "after_s": round(after, 1),
        "training_share": round(training / wall_s, 4) if wall_s else None,
    }


def explain(store: Store, default_run: str | None, best_run: str | None) -> dict | None:
    """perfbench.regress.compare of the default (a) against the best (b): the step breakdown, collective and
    metric deltas the analyzers found. None when either run is missing or they are the same run."""
    if not default_run or not best_run or default_run == best_run:
        return None
    from perfbench.regress.compare import compare_runs

    a, b = store.read_run(default_run), store.read_run(best_run)
    if not a or not b or a.get("status") != "ok" or b.get("status") != "ok":
        return None
    cmp = compare_runs(store, default_run, best_run)
    return {
        "a": default_run,
        "b": best_run,
        "metrics": cmp.metrics,
        "breakdown": cmp.breakdown,
        "collectives": cmp.collectives,
        "settings_diff": cmp.settings_diff,
    }


def answer(store: Store, rec: dict, study=None) -> dict:
    import optuna

    study = study or load_study(store, rec)
    objective = rec["objective"]
    trials, history = [], []
    best_so_far = None
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    for t in study.trials:
        if "reused" in t.user_attrs or not t.user_attrs.get("run_id") or not t.state.is_finished():
            continue
        status = _STATE.get(t.state.name, "failed")
        value = float(t.value) if status == "ok" and t.value is not None else None
        feasible = all(c <= 0 for c in t.user_attrs.get("constraints", []))
        trials.append(
            {
                "number": t.number,
                "run_id": t.user_attrs["run_id"],
                "status": status,
                "settings": t.user_attrs.get("settings") or {},
                "value": value,
                "steps": _steps_done(store, t.user_attrs["run_id"]),
            }
        )
        if value is not None and feasible:
            best_so_far = value if best_so_far is None else (max if maximize else min)(best_so_far, value)
        history.append(
            {
                "number": t.number,
                "value": value,
                "best": best_so_far,
                "status": status,
                "intermediate": {int(k): float(v) for k, v in sorted(t.intermediate_values.items())},
            }
        )
    best = best_trial(study)
    conf = rec.get("confirm") or {}
    picked = next((c for c in conf.get("candidates", []) if c["number"] == conf.get("pick")), None)
    best_value = float(best.value) if best is not None else None
    if picked is not None:  # the confirmed pick: the best median of the interleaved re-measurements
        best = next(t for t in study.trials if t.number == picked["number"])
        best_value = picked["median"]
    default = next((t for t in trials if t["number"] == 0), None)
    out = {
        "study": rec["sweep_id"],
        "objective": objective,
        "best": (
            {"run_id": best.user_attrs["run_id"], "settings": best.user_attrs["settings"], "value": best_value}
            if best is not None
            else None
        ),
        "trials": trials,
        "importance": {},
        "wall_s": float(rec.get("wall_s", 0.0)),
    }
    out["importance"], out["importance_note"] = importance(study, rec.get("min_steps"))
    out["direction"] = "maximize" if maximize else "minimize"
    out["default"] = default
    gain = None
    if best is not None and default and default["value"] and best_value:
        gain = best_value / default["value"] - 1 if maximize else default["value"] / best_value - 1
    out["gain"] = gain  # how much better the best is than the default (0.25 = 25% better)
    out["history"] = history
    out["finalist"] = rec.get("finalist")
    # the finalist re-run is a second measurement of the best: on a noisy machine a best chosen from one run
    # is often lucky (regression to the mean), so both are shown
    fin = store.read_run(rec["finalist"]) if rec.get("finalist") else None
    out["finalist_value"] = (fin.get("metrics") or {}).get(objective) if fin and fin.get("status") == "ok" else None
    out["explanation"] = explain(
        store,
        default["run_id"] if default else None,
        rec.get("finalist") or (best.user_attrs["run_id"] if best is not None else None),
    )
    out["confirmation"] = conf or None  # {"candidates": [{number, settings, runs, values, median, ...}], "pick", ...}
    out["confirmation_skipped"] = rec.get("confirm_skipped") if not conf else None  # why it is null
    out["wall_split"] = wall_split(
        store,
        [t["run_id"] for t in trials] + [r for r in rec.get("runs", []) if r not in {t["run_id"] for t in trials}],
        out["wall_s"],
    )
    out["space_size"] = rec.get("space_size")
    return _finite(out)


def _finite(o):
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o
