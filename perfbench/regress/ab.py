"""`perfbench check --ab`: baseline and candidate measured alternately in one job, judged on paired differences.

A saved baseline was measured at another time, under another load; on a shared runner the load moves CPU time
per step by as much as a 10% regression (docs/check.md). Here the two sides run in pairs, one right after the
other, and each pair gives one ratio candidate / baseline: load that drifts over the job moves both runs of a
pair and cancels in the ratio (the method of Chromium's Pinpoint and pyperf). The order alternates between pairs
(A B, B A, A B, ...), so an effect of a run's position (the second run of two starting warmer or colder) falls on
both sides equally.

Two ways to give the sides:
* a sweep config with one point (the baseline) and `--set KEY=VALUE` overrides for the candidate (any key a
  sweep can vary: `world_size`, `inject.busy_ms`, `batch_size`, `parallel.comm_fusion`, ...);
* `--baseline-cmd` / `--candidate-cmd`: two shell commands, e.g. the same `perfbench sweep` from two checkouts.
  Each must add one run to `--results` (it gets PERFBENCH_RESULTS, PERFBENCH_AB_SIDE=baseline|candidate and
  PERFBENCH_AB_PAIR=i in its environment); the run it added (the newest) is that side's run of the pair.

Each run's value is its gate value (perfbench.regress.history.gate_value: the 10th percentile of its per-step samples on
the good side), the decision perfbench.regress.check.decide_paired. A pair with a failed or unsteady run
(analyzers.analyses.steadiness) is measured again, up to `--remeasure` extra pairs per job; what is still unsteady is
kept
and flagged.
"""

from __future__ import annotations

import os
from typing import Any
import subprocess
import time

import yaml

from perfbench.errors import ConfigError, UserError
from perfbench.store import Store

SIDES = ("baseline", "candidate")


def parse_set(text: str, cfg) -> tuple[str, object]:
    """'inject.busy_ms=4' or 'busy_ms=4' -> ('busy_ms', 4.0), checked against the config's workload."""
    from perfbench.run.config import section_of

    if "=" not in text:
        raise UserError(f"bad --set {text!r}: expected KEY=VALUE, e.g. inject.busy_ms=4")
    key, raw = (s.strip() for s in text.split("=", 1))
    section, _, name = key.rpartition(".")
    if name != "world_size":
        try:
            real = section_of(name, cfg.workload)
        except KeyError:
            raise UserError(
                f"bad --set {text!r}: {key!r} is not a key a sweep can vary for {cfg.workload} "
                "(world_size or a key of parallel, train, model or inject)"
            ) from None
        if section and section != real:
            raise UserError(f"bad --set {text!r}: {name!r} is in section {real!r}, not {section!r}")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise UserError(f"bad --set {text!r}: {raw!r} is not a value") from None
    return name, value


def one_point(cfg) -> dict:
    """The settings of the config's single point (minus workload and repeat)."""
    plans = cfg.plan("ab")
    points = {tuple(sorted((k, repr(v)) for k, v in p.settings.items() if k != "repeat")): p for p in plans}
    if len(points) != 1:
        raise UserError(
            f"check --ab needs a config with one point (the baseline); {cfg.source or 'the config'} has "
            f"{len(points)} (sweep: {cfg.sweep}); give the candidate's differences with --set"
        )
    p = next(iter(points.values()))
    return {k: v for k, v in p.settings.items() if k not in ("workload", "repeat")}


class SettingsSides:
    """Both sides from one config: baseline = its point, candidate = the point with the --set overrides."""

    def __init__(self, cfg, sets: list[str]):
        from perfbench.run.config import plan_point

        self.cfg = cfg
        self.points = {"baseline": one_point(cfg)}
        cand = dict(self.points["baseline"])
        for s in sets:
            k, v = parse_set(s, cfg)
            cand[k] = v
        self.aa = cand == self.points["baseline"]  # no difference: an A/A job (the gate's false-alarm rate)
        self.points["candidate"] = cand
        for side, pt in self.points.items():  # every value checked before anything runs
            try:
                plan_point(cfg, pt, f"ab-check-{side}")
            except ConfigError as exc:
                raise UserError(f"check --ab {side}: {exc}") from None

    def settings(self, side: str) -> dict:
        return {"workload": self.cfg.workload, **self.points[side]}

    def run(self, store: Store, ab_id: str, side: str, pair: int, attempt: int) -> dict:
        from perfbench.run.config import plan_point
        from perfbench.run.sweep import SweepEvents, execute_run

        run_id = f"{ab_id}-p{pair:02d}{'' if attempt == 0 else f'x{attempt}'}-{side[0]}"
        plan = plan_point(self.cfg, self.points[side], run_id, repeat=pair)
        store.reset_run(run_id)
        return execute_run(
            self.cfg,
            store,
            ab_id,
            plan,
            SweepEvents(),
            source="ab",
            extra={"ab": {"job": ab_id, "side": side, "pair": pair, "attempt": attempt}},
        )


class CommandSides:
    """Both sides as shell commands that each add one run to the results."""

    def __init__(self, baseline_cmd: str, candidate_cmd: str):
        self.cmds = {"baseline": baseline_cmd, "candidate": candidate_cmd}

    def settings(self, side: str) -> dict:
        return {"side": side, "command": self.cmds[side]}

    def run(self, store: Store, ab_id: str, side: str, pair: int, attempt: int) -> dict:
        before = {r["run_id"] for r in store.list_runs()}
        env = dict(os.environ, PERFBENCH_RESULTS=str(store.root), PERFBENCH_AB_SIDE=side, PERFBENCH_AB_PAIR=str(pair))
        t0 = time.time()
        proc = subprocess.run(self.cmds[side], shell=True, env=env)
        new = [r for r in store.list_runs() if r["run_id"] not in before]
        if not new:
            return {
                "run_id": None,
                "status": "failed",
                "metrics": {},
                "error": f"--{side}-cmd added no run to {store.root} "
                f"(exit {proc.returncode}, {time.time() - t0:.0f} s)",
            }
        rec = max(new, key=lambda r: (r.get("timings") or {}).get("started") or 0)
        rec.setdefault("ab", {"job": ab_id, "side": side, "pair": pair, "attempt": attempt})
        return rec


def run_value(store: Store, rec: dict, metric: str) -> float | None:
    """A run's value in the paired test: its gate value (the 10% fastest steps), as the history gate uses."""
    from analyzers.catalogue import METRICS as CATALOGUE
    from perfbench.regress.compare import step_samples
    from perfbench.regress.history import gate_value

    if rec.get("status") != "ok":
        return None
    samples = step_samples(store, rec).get(metric) or []
    return gate_value((rec.get("metrics") or {}).get(metric), samples, CATALOGUE[metric].better)


def unsteady(rec: dict) -> list[str]:
    """Why a run is not steady enough to compare by its own CPU time ([] when it is, or when it cannot tell)."""
    from analyzers.analyses.steadiness import unsteady_reasons

    return unsteady_reasons(rec.get("metrics") or {}, wall=False)  # by its CPU time: the wall clock is the load's


def run_ab(
    store: Store,
    sides,
    *,
    pairs: int = 5,
    remeasure: int = 2,
    threshold: float = 0.05,
    alpha: float = 0.05,
    metrics=None,
    name: str = "ab",
    on_run=None,
) -> dict:
    from perfbench.regress.check import AB_METRICS, decide_paired
    from perfbench.run.launcher import close_spare
    from perfbench.run.sweep import new_sweep_id

    metrics = tuple(metrics or AB_METRICS)
    ab_id = new_sweep_id(f"{name}-ab")
    while store.read_sweep(ab_id) is not None:
        time.sleep(1.0)
        ab_id = new_sweep_id(f"{name}-ab")
    job: dict[str, Any] = {
        "sweep_id": ab_id,
        "kind": "ab",
        "name": name,
        "created": time.time(),
        "runs": [],
        "invocations": [],
        "ab": {"baseline": sides.settings("baseline"), "candidate": sides.settings("candidate"), "pairs": pairs},
    }
    store.write_sweep(job)
    rows, extra_left = [], remeasure
    try:
        i = 0
        while i < pairs:
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            attempt = sum(1 for r in rows if r["pair"] == i)
            recs = {}
            for side in order:
                rec = sides.run(store, ab_id, side, i, attempt)
                recs[side] = rec
                if rec.get("run_id"):
                    job["runs"].append(rec["run_id"])
                    store.write_sweep(job)
                if on_run:
                    on_run(i, side, rec)
            why = {
                s: ([f"run {r.get('status')}: {str(r.get('error'))[:120]}"] if r.get("status") != "ok" else unsteady(r))
                for s, r in recs.items()
            }
            row = {
                "pair": i,
                "attempt": attempt,
                "order": "".join("AB"[SIDES.index(s)] for s in order),
                "baseline_run": recs["baseline"].get("run_id"),
                "candidate_run": recs["candidate"].get("run_id"),
                "values": {
                    m: [run_value(store, recs["baseline"], m), run_value(store, recs["candidate"], m)] for m in metrics
                },
                "unsteady": {s: w for s, w in why.items() if w},
            }
            rows.append(row)
            if row["unsteady"] and extra_left > 0:
                extra_left -= 1
                row["replaced"] = True  # measured again: this pair's position gets a fresh pair
                continue
            i += 1
    finally:
        close_spare()
    job["finished"] = time.time()
    store.write_sweep(job)
    used = [r for r in rows if not r.get("replaced")]
    ms = [decide_paired(m, [tuple(r["values"][m]) for r in used], threshold, alpha) for m in metrics]
    vs = [m["verdict"] for m in ms]
    status = (
        "regression"
        if "regression" in vs
        else "undecided"
        if "undecided" in vs
        else "improvement"
        if "improvement" in vs
        else "unchanged"
    )
    code = 1 if status == "regression" else 2 if status == "undecided" else 0
    group = {
        "settings": sides.settings("candidate"),
        "baseline_settings": sides.settings("baseline"),
        "status": status,
        "metrics": ms,
        "current_runs": [r["candidate_run"] for r in used],
        "baseline_runs": [r["baseline_run"] for r in used],
    }
    return {
        "mode": "ab",
        "verdict": status,
        "exit_code": code,
        "job": ab_id,
        "threshold": threshold,
        "alpha": alpha,
        "baseline": {"name": "A (baseline)", "settings": sides.settings("baseline")},
        "candidate": sides.settings("candidate"),
        "current": {"kind": "ab", "id": ab_id, "unfinished_runs": []},
        "groups": [group],
        "unmatched_baseline_groups": [],
        "pairs": rows,
        "unsteady_pairs_kept": sum(1 for r in used if r["unsteady"]),
        "checked_at": time.time(),
    }


def ab_markdown(res: dict) -> str:
    from perfbench.regress.check import ICON, _settings_label, _v

    g = res["groups"][0]
    differ = {
        k: (g["baseline_settings"].get(k), g["settings"].get(k))
        for k in sorted(set(g["baseline_settings"]) | set(g["settings"]))
        if g["baseline_settings"].get(k) != g["settings"].get(k)
    }
    lines = [
        f"## perfbench check --ab: {ICON.get(res['verdict'], res['verdict'])}",
        "",
        f"Job `{res['job']}`: baseline (A) and candidate (B) run alternately, {len(g['current_runs'])} pairs "
        f"(order AB, BA, ...). Per pair the ratio B / A of each run's 10% fastest steps; paired t-test on the "
        f"log ratios, p < {res['alpha']}, threshold {res['threshold'] * 100:g}%.",
        "",
        "Candidate differs in: "
        + (", ".join(f"{k}: {a} → {b}" for k, (a, b) in differ.items()) or "nothing")
        + f" (baseline: {_settings_label(g['baseline_settings'])}).",
        "",
        f"| metric | A (median of runs) | B (median of runs) | change (geo. mean of pair ratios) | "
        f"{int((1 - res['alpha']) * 100)}% interval | pairs | p (t / Wilcoxon) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in g["metrics"]:
        chg = "–" if m.get("change") is None else f"{m['change'] * 100:+.1f}%"
        ci = "–" if not m.get("change_ci") else f"{m['change_ci'][0] * 100:+.1f}% … {m['change_ci'][1] * 100:+.1f}%"
        p = (
            "–"
            if m.get("p_value") is None
            else f"{m['p_value']:.2g}" + ("" if m.get("p_wilcoxon") is None else f" / {m['p_wilcoxon']:.2g}")
        )
        lines.append(
            f"| {m['metric']} | {_v(m.get('baseline'))} | {_v(m.get('current'))} | {chg} | {ci} | "
            f"{m.get('n_pairs', 0)} | {p} | {ICON[m['verdict']]}"
            f"{' (' + m['reason'] + ')' if m['verdict'] == 'undecided' else ''} |"
        )
    lines += [
        "",
        "| pair | order | A run | B run | " + " | ".join(f"{m} A / B" for m in g_metrics(g)) + " | note |",
        "|---|---|---|---|" + "---|" * len(g_metrics(g)) + "---|",
    ]
    for r in res["pairs"]:
        vals = " | ".join(f"{_v(r['values'][m][0])} / {_v(r['values'][m][1])}" for m in g_metrics(g))
        note = "; ".join(f"{s}: {', '.join(w)}" for s, w in r["unsteady"].items())
        note = ("measured again: " if r.get("replaced") else "kept, unsteady: " if note else "") + note
        again = f" (again {r['attempt']})" if r["attempt"] else ""
        lines.append(
            f"| {r['pair']}{again} | {r['order']} | {r['baseline_run']} | {r['candidate_run']} | {vals} | "
            f"{note or '–'} |"
        )
    lines.append(f"\nExit code {res['exit_code']} (0 no regression, 1 regression, 2 could not decide).\n")
    return "\n".join(lines)


def g_metrics(g: dict) -> list[str]:
    return [m["metric"] for m in g["metrics"]]
