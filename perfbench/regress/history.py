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

from perfbench.regress.baseline import resolve_target, run_entry
from perfbench.errors import UserError
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


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def series(history: list[dict], metric: str, *, config: str | None = None, ignore=("repeat",)) -> list[Series]:
    """One Series per configuration of `history` entries, points in entry order (then repeat).
    `config` keeps the configurations whose config_key starts with it or whose settings label contains it."""
    from analyzers.catalogue import METRICS

    better = METRICS[metric].better if metric in METRICS else None
    out: dict[str, Series] = {}
    for e in history:
        for r in sorted(e["runs"], key=lambda r: (r.get("settings") or {}).get("repeat") or 0):
            s = r.get("settings") or {}
            key = settings_key(s, ignore)
            ser = out.setdefault(key, Series(key, {k: v for k, v in s.items() if k not in ignore}, [], metric, []))
            if r.get("config_key") and r["config_key"] not in ser.config_keys:
                ser.config_keys.append(r["config_key"])
            value = _number((r.get("metrics") or {}).get(metric))
            samples = [float(x) for x in (r.get("samples") or {}).get(metric) or [] if _number(x) is not None]
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
    from perfbench.regress.changepoints import e_divisive

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
