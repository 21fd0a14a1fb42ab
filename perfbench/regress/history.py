"""History: every checked or baselined sweep/run, with its commit, time and machine, as a series per configuration.

Layout: ``<results>/history/<entry>.json``, one file per recorded target (re-recording the same sweep
replaces its entry). An entry is self-contained like a baseline (perfbench.regress.baseline.run_entry: settings,
run.json metrics, per-step samples), so the series survive pruned runs:

    {"entry_id", "time", "commit", "label", "ref", "machine": {host, cpus, platform, python},
     "source": {"kind": "sweep"|"run", "id", "via": "check"|"baseline"|"history add"}, "runs": [...]}

``ref`` is what reports call the point: the label if given, else the short commit, else the target id.
A series is the values of one metric for one configuration (the runs' settings without ``repeat``),
one point per run, ordered by entry time then repeat. Each point has the run's value (the median over its
measured steps, as everywhere) and its **gate value**, what the history gate judges: the run's speed when the
machine let it run, the 10th percentile of its per-step samples on the good side (``FAST_QUANTILE``: the 10%
fastest steps; throughput: the 90th percentile). On a shared machine the median of a run moves with the
neighbours' load (bursts slow many steps), the fast steps much less; see docs/check.md.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from analyzers.catalogue import METRICS
from analyzers.catalogue import metric as catalogued
from analyzers.stats import finite
from analyzers.stats import mann_whitney_p
from perfbench.errors import UserError
from perfbench.regress.baseline import resolve_target, run_entry
from perfbench.regress.changepoints import e_divisive, prediction_p, segments
from perfbench.regress.check import DEFAULT_METRICS, IGNORED_SETTINGS, run_check
from perfbench.regress.verdict import DECIDED, exit_code, fold
from perfbench.store import Store, atomic_write_json

FAST_QUANTILE = 0.1  # gate value: this quantile of a run's per-step samples on the good side
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+-]{0,99}$")
COMMIT_ENV = ("PERFBENCH_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT")


def current_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The commit being measured: $PERFBENCH_COMMIT / CI variables, else `git rev-parse HEAD` here; None if neither."""
    for var in COMMIT_ENV:
        if os.environ.get(var):
            return os.environ[var].strip()
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sha = r.stdout.strip()
    return sha if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{7,64}", sha) else None


def machine() -> dict:
    return {
        "host": platform.node(),
        "cpus": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _history_dir(store: Store) -> Path:
    return store.root / "history"


def _file_name(source_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", source_id)[:150] + ".json"


def check_label(label: str | None) -> str | None:
    if label is not None and not LABEL_RE.match(label):
        raise UserError(f"bad --label {label!r}: use letters, digits and . _ : / + - (at most 100, no leading symbol)")
    return label


def record(
    store: Store,
    target: str,
    *,
    via: str,
    label: str | None = None,
    commit: str | None = None,
    when: float | None = None,
) -> dict:
    """Add (or replace) the history entry of a sweep or run; its finished (ok) runs become points."""
    check_label(label)
    kind, runs = resolve_target(store, target)
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        raise UserError(f"{kind} {target!r} has no finished (ok) runs to add to the history")
    source_id = ok[0].get("sweep_id") if kind == "sweep" and ok[0].get("sweep_id") else target
    commit = commit if commit is not None else current_commit()
    started = min((r.get("timings") or {}).get("started") or math.inf for r in ok)
    entry = {
        "entry_id": Path(_file_name(source_id)).stem,
        "time": when if when is not None else time.time(),
        "runs_started": None if started == math.inf else started,
        "commit": commit,
        "label": label,
        "ref": label or (commit[:12] if commit else source_id),
        "machine": machine(),
        "source": {"kind": kind, "id": source_id, "via": via},
        "runs": [dict(run_entry(store, r), config_key=r.get("config_key")) for r in ok],
    }
    atomic_write_json(_history_dir(store) / _file_name(source_id), entry)
    return entry


def entries(store: Store) -> list[dict]:
    """All history entries, oldest first."""
    d = _history_dir(store)
    out = []
    for p in sorted(d.glob("*.json")) if d.exists() else []:
        try:
            e = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"{p}: unreadable history entry ({exc})") from None
        if not isinstance(e, dict) or not isinstance(e.get("runs"), list):
            raise UserError(f"{p}: not a perfbench history entry (no 'runs')")
        out.append(e)
    return sorted(out, key=lambda e: (e.get("time") or 0, e.get("entry_id")))


@dataclass
class Point:
    entry_id: str
    ref: str
    commit: str | None
    label: str | None
    time: float
    run_id: str
    repeat: int | None
    value: float | None
    samples: list[float] = field(default_factory=list)
    gate: float | None = None  # gate_value(): what the history gate judges


def gate_value(value: float | None, samples: list[float], better: str | None) -> float | None:
    """A run's gate value: the FAST_QUANTILE of its per-step samples on the good side (lower is better: the
    10th percentile; higher is better: the 90th), or its value when it has no samples or no direction."""
    import numpy as np

    if not samples or better not in ("lower", "higher"):
        return value
    return float(np.quantile(samples, FAST_QUANTILE if better == "lower" else 1 - FAST_QUANTILE))


@dataclass
class Series:
    key: str  # settings label, e.g. "world_size=2, workload=resnet50"
    settings: dict
    config_keys: list[str]
    metric: str
    points: list[Point]

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "settings": self.settings,
            "config_keys": self.config_keys,
            "metric": self.metric,
            "fast_quantile": FAST_QUANTILE,
            "points": [{k: v for k, v in asdict(p).items() if k != "samples"} for p in self.points],
        }


def settings_key(settings: dict, ignore=("repeat",)) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in sorted(settings) if k not in ignore) or "(no settings)"


def series(history: list[dict], metric: str, *, config: str | None = None, ignore=("repeat",)) -> list[Series]:
    """One Series per configuration of `history` entries, points in entry order (then repeat).
    `config` keeps the configurations whose config_key starts with it or whose settings label contains it."""

    better = METRICS[metric].better if metric in METRICS else None
    out: dict[str, Series] = {}
    for e in history:
        for r in sorted(e["runs"], key=lambda r: (r.get("settings") or {}).get("repeat") or 0):
            s = r.get("settings") or {}
            key = settings_key(s, ignore)
            ser = out.setdefault(key, Series(key, {k: v for k, v in s.items() if k not in ignore}, [], metric, []))
            if r.get("config_key") and r["config_key"] not in ser.config_keys:
                ser.config_keys.append(r["config_key"])
            value = finite((r.get("metrics") or {}).get(metric))
            samples = [float(x) for x in (r.get("samples") or {}).get(metric) or [] if finite(x) is not None]
            ser.points.append(
                Point(
                    e["entry_id"],
                    e.get("ref") or e["entry_id"],
                    e.get("commit"),
                    e.get("label"),
                    e.get("time") or 0.0,
                    r["run_id"],
                    s.get("repeat"),
                    value,
                    samples,
                    gate_value(value, samples, better),
                )
            )
    picked = list(out.values())
    if config:
        picked = [s for s in picked if config in s.key or any(k.startswith(config) for k in s.config_keys)]
        if not picked:
            raise UserError(
                f"no configuration matches --config {config!r}; known: " + "; ".join(sorted(out))
                if out
                else f"no history yet (--config {config!r})"
            )
    return picked


def series_with_change_points(
    store: Store, metric: str, *, config: str | None = None, ignore=("repeat",), alpha: float = 0.05
) -> list[dict]:
    """Series.to_json() of each configuration plus the E-Divisive change points (perfbench.regress.changepoints) of its
    gate values: what `perfbench history` prints and the dashboard's History page draws."""

    out = []
    for ser in series(entries(store), metric, config=config, ignore=ignore):
        d = ser.to_json()
        refs = [p for p in ser.points if p.gate is not None]
        d["change_points"] = [
            {
                "index": c.index,
                "began_at": refs[c.index].ref,
                "run_id": refs[c.index].run_id,
                "before": c.before,
                "after": c.after,
                "ratio": c.ratio,
                "confidence": c.confidence,
            }
            for c in e_divisive([p.gate for p in refs], alpha=alpha)
        ]
        out.append(d)
    return out


# ---- `check --history`: the current results against the metric's history ----------------------------------

MIN_HISTORY = 3  # reference points the prediction test needs
GATE_STATISTIC = (
    "per run: 10th percentile of the per-step samples on the good side (perfbench.regress.history.gate_value)"
)


def _worse_by(ratio: float, higher: bool) -> float:
    """> 0 worse, < 0 better, as in decide_metric: a ratio of a metric turned into how much worse it is."""
    f = 1.0 / ratio if higher else ratio
    return f - 1.0 if f >= 1 else -(1.0 / f - 1.0)


def _change_point(p, c, higher: bool) -> dict:
    """A change point as judge_series reports it: where it began (the point's ref, commit, entry, run), its size."""
    return {
        "index": c.index,
        "began_at": p.ref,
        "commit": p.commit,
        "entry_id": p.entry_id,
        "run_id": p.run_id,
        "before": c.before,
        "after": c.after,
        "ratio": c.ratio,
        "worse_by": _worse_by(c.ratio, higher),
        "confidence": c.confidence,
    }


def _prediction_verdict(res: dict, ps: tuple, w: float, ref_pts: list, cur: list, *, threshold: float, alpha: float):
    """judge_series' step 2: the verdict and its reason from the prediction and Mann-Whitney tests."""
    p_pred, p_better, p_mw = ps
    # metrics without per-step samples in the store (perfbench.regress.compare.step_samples) are judged by the
    # prediction test alone
    no_samples = not any(p.samples for p in ref_pts) or not any(p.samples for p in cur)
    sig_mw = no_samples or (p_mw is not None and p_mw < alpha)
    if w > threshold and p_pred is not None and p_pred < alpha and sig_mw:
        res.update(verdict="regression", confidence=1 - p_pred)
    elif w < -threshold and p_better is not None and p_better < alpha and sig_mw:
        res.update(verdict="improvement", confidence=1 - p_better)
    else:
        res["verdict"] = "unchanged"
    why = []
    if abs(w) <= threshold:
        why.append(f"|change| {abs(w) * 100:.1f}% ≤ {threshold * 100:g}%")
    pp = p_pred if w >= 0 else p_better
    if pp is None or pp >= alpha:
        why.append(f"prediction p={'–' if pp is None else f'{pp:.3g}'} ≥ {alpha}")
    if not sig_mw:
        why.append(f"Mann–Whitney p={'–' if p_mw is None else f'{p_mw:.3g}'} ≥ {alpha}")
    res["reason"] = (
        "; ".join(why)
        if res["verdict"] == "unchanged"
        else (
            f"{'worse' if w > 0 else 'better'} by {abs(w) * 100:.1f}% than the {len(ref_pts)} points since "
            f"{ref_pts[0].ref}; prediction p={pp:.3g}" + ("" if p_mw is None else f", Mann–Whitney p={p_mw:.3g}")
        )
    )
    return res


def judge_series(
    ser, current_entry: str, metric: str, *, threshold: float, alpha: float, permutations: int = 200
) -> dict:
    """Verdict for the current entry's points at the end of one series (perfbench.regress.history.Series).

    Each run is one point, valued by its gate value (perfbench.regress.history.gate_value: the 10% fastest steps),
    so a run that neighbours slowed in bursts still shows its own speed.

    1. E-Divisive over every point with a value; each change point is reported (where it began, size,
       confidence). If the segment holding the current points began at a change point that made the
       metric worse (better) by more than `threshold` (E-Divisive keeps a change point only when its permutation
       test gives p <= alpha): regression (improvement), began at that point's commit/run.
    2. Otherwise the current points against the history part of their own segment: regression when the
       Student-t prediction test (changepoint.prediction_p) AND the per-pair Mann–Whitney test on the
       per-step samples both give p < alpha and the current median is worse by more than `threshold`.
    """

    m = catalogued(metric)  # direction and unit: the metric catalogue
    higher, unit = m.better == "higher", m.unit

    gates = {id(p): gate_value(p.value, p.samples, m.better) for p in ser.points}
    pts = [p for p in ser.points if gates[id(p)] is not None and gates[id(p)] > 0]
    cur = [p for p in pts if p.entry_id == current_entry]
    res = {
        "settings": ser.settings,
        "key": ser.key,
        "metric": metric,
        "unit": unit,
        "higher_is_better": higher,
        "points": len(pts),
        "current_points": len(cur),
        "change_points": [],
        "statistic": GATE_STATISTIC,
    }
    if not cur:
        return dict(res, verdict="skipped", reason="not measured in the current results")
    vals = [gates[id(p)] for p in pts]

    cps = e_divisive(vals, alpha=alpha, permutations=permutations)
    res["change_points"] = [_change_point(pts[c.index], c, higher) for c in cps]
    start, _ = segments(len(vals), cps)[-1]
    first_cur = len(pts) - len(cur)
    cur_vals = vals[first_cur:]
    res["current"] = float(np.median(cur_vals))
    if start > 0:
        cp = res["change_points"][-1]
        if abs(cp["worse_by"]) > threshold:  # E-Divisive kept it: its permutation test gave p <= alpha
            verdict = "regression" if cp["worse_by"] > 0 else "improvement"
            return dict(
                res,
                verdict=verdict,
                reference=cp["before"],
                change=cp["ratio"] - 1.0,
                worse_by=cp["worse_by"],
                began_at=cp["began_at"],
                began_commit=cp["commit"],
                began_run=cp["run_id"],
                confidence=cp["confidence"],
                method="e-divisive",
                reason=f"change point at {cp['began_at']}: {'worse' if cp['worse_by'] > 0 else 'better'} by "
                f"{abs(cp['worse_by']) * 100:.1f}% > {threshold * 100:g}%, confidence {cp['confidence']:.2f}",
            )
    # reference: the history part of the segment holding the last earlier point
    ref_start = max([a for a, _ in segments(len(vals), cps) if a < first_cur] or [0])
    ref_pts = pts[ref_start:first_cur]
    if len(ref_pts) < MIN_HISTORY:
        return dict(
            res,
            verdict="no-history",
            reason=f"{len(ref_pts)} earlier point(s) in the current segment; need {MIN_HISTORY}",
        )
    ref_vals = [gates[id(p)] for p in ref_pts]
    reference = float(np.median(ref_vals))
    ratio = res["current"] / reference
    p_pred = prediction_p(ref_vals, cur_vals, higher_is_better=higher)
    p_mw = mann_whitney_p([x for p in ref_pts for x in p.samples], [x for p in cur for x in p.samples])
    w = _worse_by(ratio, higher)
    p_better = prediction_p(ref_vals, cur_vals, higher_is_better=not higher)
    res.update(
        reference=reference,
        reference_points=len(ref_pts),
        change=ratio - 1.0,
        worse_by=w,
        p_value=p_pred,
        p_mann_whitney=p_mw,
        method="prediction",
        began_at=cur[0].ref,
        began_commit=cur[0].commit,
        began_run=cur[0].run_id,
    )
    return _prediction_verdict(res, (p_pred, p_better, p_mw), w, ref_pts, cur, threshold=threshold, alpha=alpha)


def run_history_check(
    store: Store,
    current: str,
    *,
    baseline_name: str | None = None,
    label: str | None = None,
    commit: str | None = None,
    threshold: float = 0.05,
    alpha: float = 0.05,
    metrics=DEFAULT_METRICS,
    ignore=IGNORED_SETTINGS,
    permutations: int = 200,
    history_metrics=None,
) -> dict:
    """`perfbench check --history`: record the current results in the history, judge them against it
    (judge_series per configuration x metric) and, with a baseline, also run the per-pair check.
    Exit code: 1 if either judged a regression; else the per-pair check's code when a baseline was given;
    else 2 if no configuration had enough history, else 0. `history_metrics` (default: `metrics`) are the
    metrics judged against the history, `metrics` those of the per-pair check."""

    history_metrics = tuple(history_metrics or metrics)
    unknown = [m for m in history_metrics if m not in METRICS or METRICS[m].better is None]
    if unknown:
        raise UserError(
            f"cannot judge metric(s) {', '.join(unknown)} against the history; known metrics with a "
            f"direction: {', '.join(k for k, v in METRICS.items() if v.better)}"
        )
    pair = (
        run_check(store, baseline_name, current, threshold=threshold, alpha=alpha, metrics=metrics, ignore=ignore)
        if baseline_name
        else None
    )
    entry = record(store, current, via="check", label=label, commit=commit)
    past = [e for e in entries(store) if e["entry_id"] != entry["entry_id"]]
    judged = []
    for m in history_metrics:
        for ser in series(past + [entry], m, ignore=ignore):
            if any(p.entry_id == entry["entry_id"] for p in ser.points):
                judged.append(
                    judge_series(ser, entry["entry_id"], m, threshold=threshold, alpha=alpha, permutations=permutations)
                )
    hist_verdict = fold((j["verdict"] for j in judged if j["verdict"] in DECIDED), empty="no-history")
    out = {
        "entry": {k: entry[k] for k in ("entry_id", "ref", "commit", "label", "time", "machine", "source")},
        "entries": len(past) + 1,
        "verdict": hist_verdict,
        "threshold": threshold,
        "alpha": alpha,
        "permutations": permutations,
        "results": judged,
    }
    if pair is not None:
        res = dict(pair, history=out)
        if hist_verdict == "regression" and res["verdict"] != "regression":
            res.update(verdict="regression", exit_code=exit_code("regression"))
        return res
    return {
        "verdict": hist_verdict,
        "exit_code": exit_code(hist_verdict),
        "baseline": None,
        "current": {"kind": entry["source"]["kind"], "id": current, "unfinished_runs": []},
        "threshold": threshold,
        "alpha": alpha,
        "groups": [],
        "unmatched_baseline_groups": [],
        "history": out,
        "checked_at": time.time(),
    }
