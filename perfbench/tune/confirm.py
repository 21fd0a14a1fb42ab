"""The last step of a search: the best few trials re-measured side by side before one is called the best.

On a shared machine one run's objective can be off by 2x (docs/benchmarks.md), and the trial with the best
single value is biased upward for that very reason (it was selected for being high). So `confirm` takes the
`top` best distinct trials that keep every constraint and whose value is within `band` of the best trial's
(a trial 30% behind is not a contender, and re-measuring it only costs runs), and measures each of them `rounds`
more times, interleaved (A B C A B C ...: every candidate sees the same stretch of the machine's load). The pick
is the candidate with the best median of its trial value and these fresh runs: with the default 2 rounds that is
the middle of 3 runs, so neither one lucky trial nor one slow re-measurement decides (measured, docs/tune.md: a
single 65.4 among runs of 92-96 samples/s flipped a pick made from the fresh runs alone).
Each run's value is its objective as the catalogue defines it (for throughput: the median over the run's
measured steps). A re-measurement that is unsteady by its own CPU time (analyzers.analyses.steadiness: CPU time per
step CV
or ranks' CPU spread beyond their limits) does not vote; the candidate row lists it under `unsteady`. A candidate
whose fresh runs were all unsteady keeps its trial value alone as its vote (`unconfirmed: true`): on a loaded machine
that keeps the search's answer from flipping to a worse setting whose fresh run happened to be steady.
With fewer than 2 contenders there is nothing to decide and nothing is re-measured.

With `profile_best`, the last round runs the leader so far (best median of its trial and earlier rounds) with
the profiler (its profiled steps are not measured, the others are) and the other candidates without it: the
winner almost always has a profiled run that `compare` explains against the default without a launch of its
own, and no run is profiled only to lose (measured: a profiled run takes ~2.4 s longer). When the last round
overturns the leader, the caller re-runs the pick with the profiler. Runs are stored like trials
(`source: tune`, `tune.confirm_of` = the trial, `tune.round`) with deterministic ids, so `--resume` keeps the
rounds already measured.
"""

from __future__ import annotations

import math
import statistics

from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.run.config import plan_point, short_name
from perfbench.errors import ConfigError
from perfbench.store import Store
from perfbench.run.sweep import SweepEvents, execute_run


def candidates(study, top: int, band: float | None = None) -> list:
    """The `top` best finished trials with distinct settings that keep every constraint, best first; with
    `band`, only those within that fraction of the best value (0.25: at most 25% worse)."""
    import optuna

    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    ok = [
        t
        for t in study.trials
        if t.state == optuna.trial.TrialState.COMPLETE
        and "reused" not in t.user_attrs
        and all(c <= 0 for c in t.user_attrs.get("constraints", []))
    ]
    ok.sort(key=lambda t: t.value, reverse=maximize)
    out, seen = [], set()
    for t in ok:
        key = repr(sorted((t.user_attrs.get("settings") or {}).items(), key=lambda kv: kv[0]))
        if key not in seen:
            seen.add(key)
            out.append(t)
    if band is not None and out:
        best = float(out[0].value)
        out = [t for t in out if _within(float(t.value), best, band, maximize)]
    return out[:top]


def skip_reason(study, spec) -> str | None:
    """Why `confirm` re-measures nothing (its None), in words for the answer; None when it does."""
    conf = spec.confirm
    if conf.top == 0 or conf.rounds == 0:
        return f"search.confirm.{'top' if conf.top == 0 else 'rounds'} is 0: confirmation is off"
    if conf.top == 1:
        return "search.confirm.top is 1: one contender, nothing to decide between (top: 2 or more re-measures)"
    n = len(candidates(study, conf.top))
    if n == 0:
        return "no trial finished with every constraint kept"
    if n == 1:
        return "only one trial with distinct settings finished with every constraint kept"
    if len(candidates(study, conf.top, conf.band)) < 2:
        return f"one contender: no other trial within search.confirm.band ({conf.band:.0%}) of the best trial's value"
    return None


def _within(value: float, best: float, band: float, maximize: bool) -> bool:
    if maximize:
        return value >= best - band * abs(best)
    return value <= best + band * abs(best)


def confirm_run_id(study_id: str, trial_number: int, rnd: int, settings: dict) -> str:
    return f"{study_id}-c{trial_number:03d}-r{rnd}-{short_name(settings)}"


def confirm(study, cfg, store: Store, study_id: str, spec, *, profile_last: bool, env_for, events=None) -> dict | None:
    """Re-measure the top candidates interleaved and pick by median; None when confirmation is off or there
    is no candidate. `env_for(plan)` gives a run's extra environment (the compile cache)."""
    import optuna

    conf = spec.confirm
    cands = candidates(study, conf.top, conf.band) if conf.top > 0 and conf.rounds > 0 else []
    if len(cands) < 2:  # one contender (or none): nothing to decide between
        return None
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    rows = {
        t.number: {
            "number": t.number,
            "run_id": t.user_attrs["run_id"],
            "settings": t.user_attrs["settings"],
            "trial_value": float(t.value),
            "runs": [],
            "values": [],
        }
        for t in cands
    }
    profiled_number = None
    for rnd in range(1, conf.rounds + 1):
        if profile_last and rnd == conf.rounds:  # the last round profiles the leader so far only
            profiled_number = _leader(rows, maximize)
        for t in cands:
            row = rows[t.number]
            profiled = profiled_number == t.number
            run_id = confirm_run_id(study_id, t.number, rnd, row["settings"])
            record = store.read_run(run_id)
            if not (record and record.get("status") == "ok"):  # measured already: a resumed search keeps it
                record = _measure(
                    cfg, store, study_id, run_id, t.number, rnd, row["settings"], profiled, env_for, events
                )
            row["runs"].append(run_id)
            v = (record.get("metrics") or {}).get(spec.objective) if record.get("status") == "ok" else None
            why = unsteady_reasons(record.get("metrics") or {}, wall=False)
            if why and v is not None:  # not steady by its own CPU time: left out of the vote, and said so
                row.setdefault("unsteady", {})[run_id] = why
                continue
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                row["values"].append(float(v))
    for row in rows.values():
        # every fresh run unsteady: that says the machine was noisy, not that the setting is worse, so the trial's
        # own value stands alone (flagged); fresh runs that failed or measured nothing leave no vote
        if not row["values"] and row.get("unsteady") and len(row["unsteady"]) == len(row["runs"]):
            row["unconfirmed"] = True
        row["median"] = _vote(row) if row["values"] or row.get("unconfirmed") else None
    measured = [r for r in rows.values() if r["median"] is not None]
    if not measured:
        return {"candidates": list(rows.values()), "pick": None, "profiled_run": None, "rounds": conf.rounds}
    pick = (max if maximize else min)(measured, key=lambda r: r["median"])
    # the pick's profiled run, when the leader going into the last round won (else the caller profiles the pick)
    profiled_run = pick["runs"][-1] if pick["number"] == profiled_number else None
    if profiled_run and (store.read_run(profiled_run) or {}).get("status") != "ok":
        profiled_run = None
    return {
        "candidates": list(rows.values()),
        "pick": pick["number"],
        "profiled_run": profiled_run,
        "rounds": conf.rounds,
    }


def _vote(row: dict) -> float:
    """A candidate's value: the median of its trial's own value and its re-measurements so far."""
    return statistics.median([row["trial_value"], *row["values"]])


def _leader(rows: dict, maximize: bool) -> int:
    """The candidate with the best vote so far (first on ties: candidates are ordered best trial first)."""
    return (max if maximize else min)(rows.values(), key=_vote)["number"]


def _measure(
    cfg,
    store: Store,
    study_id: str,
    run_id: str,
    trial_number: int,
    rnd: int,
    settings: dict,
    profiled: bool,
    env_for,
    events,
) -> dict:
    try:
        plan = plan_point(cfg, settings, run_id)
    except ConfigError as exc:  # cannot happen for a point that already ran, but never stop the answer for it
        return {"status": "failed", "error": str(exc), "metrics": {}}
    if not profiled:
        plan.run_config["profile"] = dict(plan.run_config["profile"], enabled=False)
    if events is not None and events.confirm_started:
        events.confirm_started(trial_number, rnd, settings, profiled)
    store.reset_run(run_id)
    record = execute_run(
        cfg,
        store,
        study_id,
        plan,
        SweepEvents(run_progress=events.run_progress if events else None),
        source="tune",
        env_extra=env_for(plan),
        skip_teardown=True,
        extra={"tune": {"study": study_id, "confirm_of": trial_number, "round": rnd, "finalist": profiled}},
    )
    if events is not None and events.confirm_finished:
        events.confirm_finished(trial_number, rnd, settings, record)
    return record
