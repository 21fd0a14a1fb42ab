"""Baselines for `perfbench check`: a named, self-contained snapshot of one run or one sweep.

`<results>/baselines/<name>.json` keeps, for every finished run of the target, its settings, its
run.json metrics and its per-step samples (perfbench.regress.compare.step_samples), so a baseline still works
after the runs it came from are deleted or the results folder is pruned.
"""

from __future__ import annotations

import re
import time

from perfbench import __version__
from perfbench.regress.compare import step_samples
from perfbench.errors import UserError
from perfbench.store import RunNotFound, Store

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_name(name: str) -> str:
    if not name or not NAME_RE.match(name):
        raise UserError(
            f"bad baseline name {name!r}: use letters, digits, '.', '_' or '-' (at most 100, no leading dot)"
        )
    return name


def resolve_target(store: Store, target: str) -> tuple[str, list[dict]]:
    """A run id (or unique prefix) or a sweep id → ("run"|"sweep", run records)."""
    if not target:
        raise UserError("empty run/sweep id")
    sweep = store.read_sweep(target) if "/" not in target else None
    if sweep is not None:
        runs = store.list_runs(sweep=target)
        if not runs:  # sweep file lists ids but the records carry another sweep_id (or none yet)
            runs = [r for r in (store.read_run(i) for i in sweep.get("run_ids", [])) if r]
        if not runs:
            raise UserError(f"sweep {target!r} has no runs in {store.root}")
        return "sweep", runs
    runs_of_sweep = store.list_runs(sweep=target)
    if runs_of_sweep:
        return "sweep", runs_of_sweep
    try:
        return "run", [store.get_run(target)]
    except RunNotFound:
        raise UserError(
            f"no run or sweep {target!r} in {store.root} (see `perfbench ls --results {store.root}`)"
        ) from None


def run_entry(store: Store, rec: dict) -> dict:
    """What a baseline (and the current side of a check) needs from one run."""
    entry = {
        "run_id": rec["run_id"],
        "sweep_id": rec.get("sweep_id"),
        "status": rec.get("status"),
        "error": rec.get("error"),
        "settings": rec.get("settings") or {},
        "metrics": rec.get("metrics") or {},
        "samples": {},
    }
    if rec.get("status") == "ok":
        entry["samples"] = step_samples(store, rec)
    return entry


def save_baseline(store: Store, target: str, name: str, *, overwrite: bool = True) -> dict:
    check_name(name)
    kind, runs = resolve_target(store, target)
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        states = ", ".join(f"{r['run_id']}: {r.get('status')}" for r in runs[:5])
        raise UserError(f"{kind} {target!r} has no finished (ok) runs to use as a baseline ({states})")
    if not overwrite and store.read_baseline(name) is not None:
        raise UserError(f"baseline {name!r} exists (use --force to replace it)")
    baseline = {
        "name": name,
        "created": time.time(),
        "perfbench": __version__,
        "source": {"kind": kind, "id": target, "results": str(store.root.resolve())},
        "skipped": [{"run_id": r["run_id"], "status": r.get("status")} for r in runs if r.get("status") != "ok"],
        "runs": [run_entry(store, r) for r in ok],
    }
    store.write_baseline(name, baseline)
    return baseline


def load_baseline(store: Store, name: str) -> dict:
    check_name(name)
    try:
        b = store.read_baseline(name)
    except ValueError as exc:  # JSONDecodeError
        raise UserError(f"{store.baselines_dir / (name + '.json')}: unreadable baseline ({exc})") from None
    if b is None:
        known = store.list_baselines()
        hint = f"known: {', '.join(known)}" if known else "none saved yet: `perfbench baseline save RUN|SWEEP --name N`"
        raise UserError(f"no baseline {name!r} in {store.root} ({hint})")
    if not isinstance(b, dict) or not isinstance(b.get("runs"), list) or not b["runs"]:
        raise UserError(f"{store.baselines_dir / (name + '.json')}: not a perfbench baseline (no 'runs')")
    return b
