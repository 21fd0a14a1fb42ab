"""`perfbench advise RUN --try N`: prove the advice by experiment.

The N best root findings of a stored run that carry a knob (`try`, a dict of dotted config keys) are each run
for real: the run's own configuration with only that knob changed, launched, ingested and stored like a sweep's
runs (perfbench.run.sweep.execute_run: no second launcher). To see each fix against the same stretch of a shared
machine's load, every round runs the original configuration again and then each fix (orig, fix 1, fix 2, orig,
fix 1, fix 2, ... as `tune`'s confirmation interleaves its candidates). The profiler is off in all of them
(it would stretch every run alike and only cost time).

A fix's measured gain is mean(original step ms) - mean(fix step ms) over the rounds, each run's step ms being
its stored `step_time_s` (the catalogue's one definition: median over measured steps of the slowest rank's step
time). Its interval is the Welch 95% interval of that difference (analyzers.stats.welch_ci), null with fewer
than 2 ok runs a side. A fix run that fails is stored failed with its reason and the others go on.

Runs are stored with `source: advise` and `advise: {of, finding, try, round}` (`finding` null and `try` {} for
the original's re-runs), under a sweep record of kind `advise`. One row per tried finding is appended to
`<results>/advice/trials.jsonl` (Store.append_advice_trials) so that predicted and measured gains can be
checked and calibrated over time (docs/advice.md, docs/store.md).
"""

from __future__ import annotations

import json
import math
import statistics
import time

import pandas as pd

from analyzers.stats import finite, step_ms, welch_ci
from perfbench.errors import ConfigError, UserError
from perfbench.run.config import RunPlan, parse_config, plan_point, section_of, short_name
from perfbench.run.launcher import close_spare
from perfbench.run.script import script_source
from perfbench.run.sweep import SweepEvents, execute_run, new_sweep_id
from perfbench.store import Store

#: run sources perfbench launched itself from a sweep config, so it can launch them again
RERUNNABLE_SOURCES = ("sweep", "tune", "advise")
#: the config sections a `try` key may change (the sweepable ones: perfbench.run.config.section_of)
TRY_SECTIONS = ("parallel", "train", "model", "inject")


class CannotRerun(UserError):
    """`--try` on a run perfbench did not launch (an imported profile) or whose configuration is gone."""


def rerun_problem(record: dict) -> str | None:
    """Why perfbench cannot re-run this stored run, or None when it can."""
    rid, source = record.get("run_id"), record.get("source") or "sweep"
    if source not in RERUNNABLE_SOURCES:
        what = "an imported profile (source: analyze)" if source == "analyze" else f"a run of source {source!r}"
        return (
            f"run {rid} is {what}: perfbench did not launch it and cannot re-run it with a knob changed "
            "(--try needs a run of `perfbench sweep` or `perfbench tune`)"
        )
    cfg = record.get("config") or {}
    if not cfg.get("workload") or not cfg.get("world_size"):
        return f"run {rid} has no stored configuration (run.json `config`) to re-run"
    return None


# ---- which findings ---------------------------------------------------------------------------------


def parse_try(text) -> dict | None:
    """A finding's `try` (JSON text of {dotted key: value}, per the advice contract) as a dict; None when absent."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    if isinstance(text, dict):
        return text or None
    try:
        d = json.loads(text)
    except (TypeError, ValueError):
        return None
    return d if isinstance(d, dict) and d else None


def choose_findings(advice: pd.DataFrame | None, n: int) -> list[dict]:
    """The `n` best root findings (`symptom_of` null) that carry a `try`, by `gain_ms` largest first (null gains
    last, table order on ties); a finding whose change equals one already chosen is left out (one run per knob)."""
    if advice is None or advice.empty or "try" not in advice.columns:
        return []
    rows = []
    for pos, r in enumerate(advice.to_dict("records")):
        change = parse_try(r.get("try"))
        sym = r.get("symptom_of")
        if change is None or not (sym is None or (isinstance(sym, float) and math.isnan(sym))):
            continue
        gain = finite(r.get("gain_ms"))
        rows.append((gain is None, -(gain or 0.0), pos, r, change))
    rows.sort(key=lambda t: t[:3])
    out, seen = [], set()
    for _, _, _, r, change in rows:
        key = json.dumps(change, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append(
            {
                "id": str(r.get("id") or r.get("rule")),
                "rule": r.get("rule"),
                "try": change,
                "gain_ms": finite(r.get("gain_ms")),
                "predicted_step_ms": finite(r.get("predicted_step_ms")),
                "message": r.get("message"),
            }
        )
        if len(out) == n:
            break
    return out


# ---- the runs ---------------------------------------------------------------------------------------


def base_config(store: Store, record: dict):
    """A SweepConfig whose every section is the stored run's own resolved configuration (so a planned point
    with no change is that run again), with the launch settings of the run's sweep (defaults when gone)."""
    rc = record["config"]
    sweep = store.read_sweep(record.get("sweep_id") or "") if record.get("sweep_id") else None
    launch = dict(((sweep or {}).get("config") or {}).get("launch") or {})
    raw = {
        "name": "advise",
        "workload": rc["workload"],
        "launch": launch,
        "sweep": {"world_size": [int(rc["world_size"])]},
        **{s: dict(rc.get(s) or {}) for s in ("model", "train", "profile", "parallel", "inject")},
    }
    if rc["workload"] == "script":  # the script and its knobs, templates back in place
        raw["script"] = script_source(rc["script"])
        raw["knobs"] = dict(rc.get("knobs") or {})
        raw.pop("model")
    raw["launch"]["max_world_size"] = max(int(launch.get("max_world_size", 8)), int(rc["world_size"]))
    try:
        return parse_config(raw, default_name="advise")
    except ConfigError as exc:
        raise CannotRerun(f"run {record['run_id']}: its stored configuration no longer validates ({exc})") from None


def undotted(change: dict, workload: str) -> dict:
    """{"parallel.comm_fusion": "all"} -> {"comm_fusion": "all"}, checking that each key names a sweepable key
    of that section (ConfigError naming the key otherwise)."""
    out = {}
    for dotted, value in change.items():
        section, _, key = str(dotted).partition(".")
        if not key or section not in TRY_SECTIONS:
            raise ConfigError(
                f"try: {dotted!r} is not a key perfbench can change (expected one of "
                f"{', '.join(s + '.KEY' for s in TRY_SECTIONS)})"
            )
        try:
            home = section_of(key, workload)
        except KeyError:
            raise ConfigError(f"try: {dotted!r}: {section} has no key {key!r} for workload {workload}") from None
        if home != section:
            raise ConfigError(f"try: {dotted!r}: {key!r} is a key of {home}, not of {section}")
        out[key] = value
    return out


def plan_change(cfg, record: dict, change: dict, run_id: str, repeat: int) -> RunPlan:
    """The stored run's configuration with only `change` applied (ConfigError if the result breaks a rule),
    its profiler off."""
    point = {k: v for k, v in (record.get("settings") or {}).items() if k not in ("workload", "repeat")}
    point["world_size"] = int(record["config"]["world_size"])
    point.update(undotted(change, cfg.workload))
    plan = plan_point(cfg, point, run_id, repeat)
    plan.run_config["profile"] = dict(plan.run_config["profile"], enabled=False)
    return plan


def measured_gain(base_ms: list[float], fix_ms: list[float]) -> dict:
    """Measured gain of a fix in ms/step: mean(base) - mean(fix), with the Welch 95% interval of that difference
    (null with fewer than 2 values a side); every part null when a side has no value."""

    if not base_ms or not fix_ms:
        return {"gain_ms": None, "low_ms": None, "high_ms": None, "n_base": len(base_ms), "n_fix": len(fix_ms)}
    gain = statistics.fmean(base_ms) - statistics.fmean(fix_ms)
    ci = welch_ci(fix_ms, base_ms)  # interval of mean(base) - mean(fix)
    return {
        "gain_ms": gain,
        "low_ms": ci[0] if ci else None,
        "high_ms": ci[1] if ci else None,
        "n_base": len(base_ms),
        "n_fix": len(fix_ms),
    }


def _step_ms(record: dict) -> float | None:
    return step_ms((record.get("metrics") or {}).get("step_time_s")) if record.get("status") == "ok" else None


def _planned_fixes(store: Store, cfg, record: dict, session: str, chosen: list[dict]) -> list[dict]:
    """The chosen findings as fixes to run, each planned once: the original must plan as it is; a knob that breaks
    a rule is stored failed once (its error kept) and not run."""
    of = record["run_id"]
    fixes = [dict(c, runs=[], step_ms=[], errors=[]) for c in chosen]
    try:  # the original must plan as it is; a knob that breaks a rule is stored failed once and not run
        plan_change(cfg, record, {}, f"{session}-orig", 0)
    except ConfigError as exc:
        raise CannotRerun(f"run {of}: its stored configuration no longer plans ({exc})") from None
    for k, fix in enumerate(fixes, 1):
        fix["tag"] = f"f{k}-{short_name(undotted_safe(fix['try'], cfg.workload))}"
        try:
            plan_change(cfg, record, fix["try"], f"{session}-{fix['tag']}", 0)
        except ConfigError as exc:
            run_id = f"{session}-{fix['tag']}"
            _store_failed(store, session, record, run_id, fix, str(exc))
            fix["runs"].append(run_id)
            fix["errors"].append(f"cannot apply the knob: {exc}")
    return fixes


def try_fixes(
    store: Store,
    record: dict,
    n: int,
    *,
    repeats: int = 2,
    advice: pd.DataFrame | None = None,
    events=None,
    announce=None,
) -> dict:
    """Run the `n` best knobs of `record`'s advice (`repeats` rounds, each the original then every fix) and
    return {session, of, fixes: [...], original: {...}}; the rows are also appended to the store's advice trials.
    `events`: perfbench.run.sweep.SweepEvents for progress; `announce(text)`: one line before each round."""

    if n < 1 or repeats < 1:
        raise UserError(f"--try {n} --repeats {repeats}: both must be at least 1")
    problem = rerun_problem(record)
    if problem:
        raise CannotRerun(problem)
    of = record["run_id"]
    if advice is None:
        advice = store.read_table(of, "advice")
    chosen = choose_findings(advice, n)
    if not chosen:
        raise UserError(f"run {of}: no root finding carries a knob to try (`try`), so there is nothing to run")
    cfg = base_config(store, record)
    events = events or SweepEvents()
    session = new_sweep_id(f"{of}-advise")
    while store.read_sweep(session) is not None:  # two sessions started within a second
        time.sleep(1.0)
        session = new_sweep_id(f"{of}-advise")
    fixes = _planned_fixes(store, cfg, record, session, chosen)
    base = {"runs": [], "step_ms": [], "errors": []}
    runnable = [f for f in fixes if not f["errors"]]
    sweep = {
        "sweep_id": session,
        "kind": "advise",
        "name": f"{of}-advise",
        "created": time.time(),
        "config": cfg.raw,
        "of_run": of,
        "repeats": repeats,
        "runs": [r for f in fixes for r in f["runs"]],
        "findings": [{"id": f["id"], "try": f["try"]} for f in fixes],
        "invocations": [{"started": time.time()}],
    }
    store.write_sweep(sweep)
    total = repeats * (len(runnable) + 1) if runnable else 0
    i = 0
    try:
        for rnd in range(1, repeats + 1 if runnable else 1):
            if announce:
                announce(f"round {rnd}/{repeats}: the original configuration, then {len(runnable)} fix(es)")
            for fix in [None, *runnable]:
                i += 1
                change = {} if fix is None else fix["try"]
                run_id = f"{session}-{'orig' if fix is None else fix['tag']}-r{rnd}"
                side = base if fix is None else fix
                plan = plan_change(cfg, record, change, run_id, rnd)
                sweep["runs"].append(run_id)
                store.write_sweep(sweep)
                if events.run_started:
                    events.run_started(i, total, plan)
                store.reset_run(run_id)
                rec = execute_run(
                    cfg,
                    store,
                    session,
                    plan,
                    events,
                    source="advise",
                    skip_teardown=True,
                    extra={
                        "advise": {"of": of, "finding": None if fix is None else fix["id"], "try": change, "round": rnd}
                    },
                )
                if events.run_finished:
                    events.run_finished(i, total, plan, rec)
                side["runs"].append(run_id)
                ms = _step_ms(rec)
                if ms is not None:
                    side["step_ms"].append(ms)
                else:
                    side["errors"].append(rec.get("error") or rec.get("status"))
    finally:
        close_spare()
        sweep["invocations"][-1]["finished"] = time.time()
        store.write_sweep(sweep)
    rows = [_trial_row(session, record, fix, base) for fix in fixes]
    store.append_advice_trials(rows)
    original = {k: base[k] for k in ("runs", "step_ms", "errors")} | {"stored_step_ms": _step_ms(record)}
    return {"session": session, "of": of, "repeats": repeats, "original": original, "fixes": rows}


def undotted_safe(change: dict, workload: str) -> dict:
    """undotted() for a run-id fragment only: keys it cannot place keep their last part."""
    try:
        return undotted(change, workload)
    except ConfigError:
        return {str(k).rpartition(".")[2]: v for k, v in change.items()}


def _store_failed(store: Store, session: str, record: dict, run_id: str, fix: dict, reason: str) -> None:
    """A fix that could not even be planned is stored failed with its reason, like a run that crashed."""
    store.reset_run(run_id)
    store.write_run(
        {
            "run_id": run_id,
            "sweep_id": session,
            "source": "advise",
            "status": "failed",
            "error": f"cannot apply the knob: {reason}",
            "settings": record.get("settings") or {},
            "config": {},
            "env": {},
            "timings": {"started": time.time(), "finished": time.time()},
            "metrics": {},
            "advise": {"of": record["run_id"], "finding": fix["id"], "try": fix["try"], "round": None},
        }
    )


def knob_gain(fix: dict, record: dict) -> float | None:
    """The gain predicted for the knob itself: the run's step minus the step predicted with the knob applied
    (`predicted_step_ms`) where the finding predicts one, else its `gain_ms`. They differ where a finding's gain is
    the time it explains and its knob removes only part of it (fp16 compression halves the bytes term of the
    exposed communication and adds its casts; more micro-batches shrink the bubble to the next ideal)."""
    step = _step_ms(record)
    if fix.get("predicted_step_ms") is not None and step is not None:
        return step - fix["predicted_step_ms"]
    return fix.get("gain_ms")


def _trial_row(session: str, record: dict, fix: dict, base: dict) -> dict:
    """One row of the advice trials table (docs/store.md): the prediction next to the measurement."""
    m = measured_gain(base["step_ms"], fix["step_ms"])
    status = "ok" if fix["step_ms"] and base["step_ms"] else "failed"
    error = None
    if status == "failed":
        error = "; ".join(dict.fromkeys(str(e) for e in (fix["errors"] or base["errors"]) if e)) or "no run finished"
    return {
        "time": time.time(),
        "session": session,
        "of": record["run_id"],
        "workload": record["config"]["workload"],
        "world_size": record["config"]["world_size"],
        "finding": fix["id"],
        "rule": fix["rule"],
        "try": json.dumps(fix["try"], sort_keys=True),
        "predicted_gain_ms": knob_gain(fix, record),
        "predicted_step_ms": fix["predicted_step_ms"],
        "base_step_ms": statistics.median(base["step_ms"]) if base["step_ms"] else None,
        "fix_step_ms": statistics.median(fix["step_ms"]) if fix["step_ms"] else None,
        "measured_gain_ms": m["gain_ms"],
        "measured_low_ms": m["low_ms"],
        "measured_high_ms": m["high_ms"],
        "n_base": m["n_base"],
        "n_fix": m["n_fix"],
        "status": status,
        "error": error,
        "runs": list(fix["runs"]),
        "base_runs": list(base["runs"]),
    }


def render_tried(out, tried: dict) -> None:
    """The predicted vs measured table of one `--try` session (rich Console `out`)."""
    from rich.table import Table
    from rich.text import Text

    def ms(v):
        return "-" if v is None else f"{v:.1f}"

    orig = tried["original"]
    t = Table(
        title=f"advise --try: {len(tried['fixes'])} fix(es) of {tried['of']}, {tried['repeats']} round(s) "
        f"interleaved with the original (session {tried['session']})"
    )
    for col in (
        "finding",
        "try",
        "predicted gain ms",
        "measured gain ms",
        "95% interval",
        "step ms orig -> fix",
        "runs ok",
        "status",
    ):
        t.add_column(col, justify="right" if "ms" in col or col == "runs ok" else "left")
    for r in tried["fixes"]:
        iv = "-" if r["measured_low_ms"] is None else f"[{r['measured_low_ms']:.1f}, {r['measured_high_ms']:.1f}]"
        status = r["status"] if r["status"] == "ok" else f"failed: {r['error']}"
        cells = (
            r["finding"],
            r["try"],
            ms(r["predicted_gain_ms"]),
            ms(r["measured_gain_ms"]),
            iv,
            f"{ms(r['base_step_ms'])} -> {ms(r['fix_step_ms'])}",
            f"{r['n_fix']}/{len(r['runs'])}",
            status,
        )
        t.add_row(*(Text(str(c)) for c in cells))
    out.print(t)
    if orig["errors"]:
        out.print(Text(f"re-runs of the original failed: {'; '.join(map(str, orig['errors']))}", style="red"))
    out.print(
        "measured gain = mean step ms of the original's re-runs - mean of the fix's runs (step_time_s, "
        "median over measured steps); interval: Welch 95%, shown with 2+ ok runs a side. "
        "Kept in <results>/advice/trials.jsonl (docs/advice.md).",
        highlight=False,
    )
