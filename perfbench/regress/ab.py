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
the good side), the decision `decide_paired` below. A pair with a failed or unsteady run
(analyzers.analyses.steadiness) is measured again, up to `--remeasure` extra pairs per job; what is still unsteady is
kept
and flagged.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from typing import Any

import numpy as np
import yaml

from analyzers.analyses.steadiness import unsteady_reasons
from analyzers.catalogue import AB_DEFAULT
from analyzers.catalogue import METRICS as CATALOGUE
from perfbench.errors import ConfigError, UserError
from perfbench.regress.compare import METRICS, step_samples
from perfbench.regress.history import gate_value
from perfbench.regress.verdict import decide, exit_code, fold, reason
from perfbench.run.config import plan_point, section_of
from perfbench.run.launcher import close_spare
from perfbench.run.sweep import SweepEvents, execute_run, new_sweep_id
from perfbench.store import Store

SIDES = ("baseline", "candidate")
MIN_PAIRS = 3


def decide_paired(metric: str, pairs: list[tuple[float | None, float | None]], threshold: float, alpha: float) -> dict:
    """`check --ab`: the verdict for one metric from the (baseline, candidate) values of interleaved run pairs.

    d_i = ln(candidate_i / baseline_i), turned so that > 0 = worse (throughput: ln(baseline_i / candidate_i));
    pairs missing a side or with a value <= 0 are left out. With n >= MIN_PAIRS pairs: mean d, its standard
    error s / sqrt(n), a two-sided one-sample t-test of mean d = 0 (df = n - 1), the effect exp(mean d) (the
    geometric mean of the per-pair ratios) with its (1 - alpha) interval exp(mean d +- t_{1-alpha/2} s/sqrt(n)),
    and the Wilcoxon signed-rank p (reported; with n <= 5 it cannot go below 0.0625). Verdict: regression =
    p < alpha and exp(mean d) - 1 > threshold; improvement = p < alpha and exp(-mean d) - 1 > threshold;
    otherwise unchanged; fewer than MIN_PAIRS usable pairs: undecided. Load that drifts over the job moves both
    runs of a pair alike and cancels in d_i; load that changes within a pair is noise the t-test sees."""
    from scipy import stats

    higher, unit, _ = METRICS.get(metric, (False, "", "ratio"))
    res = {
        "metric": metric,
        "unit": unit,
        "higher_is_better": higher,
        "threshold": threshold,
        "alpha": alpha,
        "change_kind": "relative",
        "basis": "pairs",
    }
    ok = [(b, c) for b, c in pairs if b is not None and c is not None and b > 0 and c > 0]
    res.update(
        n_pairs=len(ok),
        pairs_left_out=len(pairs) - len(ok),
        baseline=float(np.median([b for b, _ in ok])) if ok else None,
        current=float(np.median([c for _, c in ok])) if ok else None,
    )
    if len(ok) < MIN_PAIRS:
        return dict(
            res, verdict="undecided", change=None, p_value=None, reason=f"{len(ok)} complete pair(s); need {MIN_PAIRS}"
        )
    d = np.array([math.log(b / c) if higher else math.log(c / b) for b, c in ok])
    n, mean = len(d), float(d.mean())
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    tq = float(stats.t.ppf(1 - alpha / 2, n - 1))
    if se == 0:
        p = 1.0 if mean == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean / se), n - 1))
    try:
        p_w = float(stats.wilcoxon(d).pvalue) if np.any(d != 0) else 1.0
    except ValueError:
        p_w = None
    worse = math.exp(mean) - 1.0 if mean >= 0 else -(math.exp(-mean) - 1.0)
    lo, hi = math.exp(mean - tq * se), math.exp(mean + tq * se)
    # change of the metric itself (candidate / baseline - 1), as in `check`; worse_by is turned by direction
    ratio = math.exp(-mean) if higher else math.exp(mean)
    ci = (1 / hi - 1, 1 / lo - 1) if higher else (lo - 1, hi - 1)
    significant = p < alpha
    verdict = decide(significant, worse, threshold)
    res.update(
        verdict=verdict,
        change=ratio - 1.0,
        change_ci=list(ci),
        worse_by=worse,
        mean_log_ratio=mean,
        sd_log_ratio=sd,
        t=None if se == 0 else mean / se,
        p_value=p,
        p_wilcoxon=p_w,
        threshold_used=threshold,
    )
    res["reason"] = reason(
        verdict,
        None if significant else f"paired t p={p:.3g} ≥ {alpha}",
        f"|change| {abs(worse) * 100:.1f}% ≤ {threshold * 100:g}%" if abs(worse) <= threshold else None,
        lambda: (
            f"paired t p={p:.3g} < {alpha}, {'worse' if worse > 0 else 'better'} by {abs(worse) * 100:.1f}% > "
            f"{threshold * 100:g}% over {n} pairs"
        ),
    )
    return res


def parse_set(text: str, cfg) -> tuple[str, object]:
    """'inject.busy_ms=4' or 'busy_ms=4' -> ('busy_ms', 4.0), checked against the config's workload."""

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

    if rec.get("status") != "ok":
        return None
    samples = step_samples(store, rec).get(metric) or []
    return gate_value((rec.get("metrics") or {}).get(metric), samples, CATALOGUE[metric].better)


def unsteady(rec: dict) -> list[str]:
    """Why a run is not steady enough to compare by its own CPU time ([] when it is, or when it cannot tell)."""

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

    metrics = tuple(metrics or AB_DEFAULT)
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
    status = fold(m["verdict"] for m in ms)
    code = exit_code(status)
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
