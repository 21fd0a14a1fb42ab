"""The store's JSON side: run records (`runs/<run_id>/run.json`), sweeps, baselines, advice trials, run ids
and short ids, atomic writes. Standard library only, so `perfbench ls` and anything else that reads only
records starts without pandas; `perfbench.store.Store` is this plus the Parquet tables (layout and atomicity:
perfbench/store.py's docstring)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from perfbench.errors import UserError

#: a run record's statuses (`status` in run.json; perfbench/run/record.py types the record)
STATUSES = ("planned", "running", "ok", "failed", "pruned")
FINISHED = ("ok", "failed", "pruned")  # statuses that `--resume` does not re-run (failed: use --retry-failed)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode())


def _json_default(o: Any):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


class RunNotFound(UserError):
    """No stored run has this id, short id or prefix."""


class AmbiguousRun(UserError):
    """Several stored runs match a short id or prefix; the message lists them."""


def short_id(rec: dict) -> str:
    """The run id without its sweep id prefix, as `perfbench ls` shows it (e.g. `ws2-r0`)."""
    rid, sid = rec["run_id"], rec.get("sweep_id") or ""
    return rid[len(sid) + 1 :] if sid and rid.startswith(sid + "-") else rid


#: per-rank detail tables `perfbench.run.ingest.rank_detail` computes on demand and caches in the store
RANK_DETAIL_TABLES = ("memory", "memory_timeline", "memory_live", "memory_attribution", "memory_modules")


def rank_detail_name(rank: int, table: str) -> str:
    """The store table holding rank `rank`'s cached detail `table` (`done`: the marker that it is cached)."""
    return f"detail_rank{rank}_{table}"


class Records:
    """The store's JSON side (see the module docstring); `perfbench.store.Store` adds the tables."""

    def __init__(self, root: str | os.PathLike, *, create: bool = True):
        self.root = Path(root)
        if not self.root.exists():
            if not create:
                raise UserError(
                    f"no results at {self.root} (run `perfbench sweep CONFIG` or `perfbench analyze PATH` first)"
                )
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise UserError(f"results path {self.root} is not a directory")
        self.runs_dir = self.root / "runs"
        self.sweeps_dir = self.root / "sweeps"
        self.baselines_dir = self.root / "baselines"

    # ---- runs ------------------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def table_path(self, run_id: str, name: str) -> Path:
        """Where the run's table `name` is (or would be) kept: `perfbench.store.Store` reads and writes it."""
        return self.run_dir(run_id) / "tables" / f"{name}.parquet"

    def artifacts_dir(self, run_id: str) -> Path:
        d = self.run_dir(run_id) / "artifacts"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def reset_run(self, run_id: str) -> None:
        """Forget an unfinished run entirely (its record, tables and artifacts) before re-running it."""
        d = self.run_dir(run_id)
        if d.exists():
            trash = d.with_name(f".{run_id}.trash")
            if trash.exists():
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(d, trash)
            shutil.rmtree(trash, ignore_errors=True)

    def table_names(self, run_id: str) -> list[str]:
        d = self.run_dir(run_id) / "tables"
        return sorted(p.stem for p in d.glob("*.parquet")) if d.exists() else []

    def read_run(self, run_id: str) -> dict | None:
        path = self.run_dir(run_id) / "run.json"
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, OSError) as exc:  # should not happen with atomic writes
            raise UserError(f"{path}: unreadable run record ({exc})") from None

    def get_run(self, run_id: str) -> dict:
        """A run by its id, by the short id `perfbench ls` shows (the id without its sweep prefix, e.g.
        `ws2-r0`), or by a unique prefix of either. Unknown: `RunNotFound`; several match: `AmbiguousRun`
        listing them (both UserErrors: one line, exit 2)."""
        rec = self.read_run(run_id) if run_id and "/" not in run_id and not run_id.startswith(".") else None
        if rec is not None:
            return rec
        runs = self.list_runs() if run_id else []
        for matches in (
            [r for r in runs if short_id(r) == run_id],
            [r for r in runs if r["run_id"].startswith(run_id) or short_id(r).startswith(run_id)],
        ):
            if len(matches) == 1:
                return matches[0]
            if matches:
                shown = ", ".join(r["run_id"] for r in matches[:10])
                more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
                raise AmbiguousRun(
                    f"run id {run_id!r} is ambiguous: it matches {len(matches)} runs in {self.root}: "
                    f"{shown}{more} (give more of the id)"
                )
        raise RunNotFound(f"no run {run_id!r} in {self.root} (see `perfbench ls --results {self.root}`)")

    def list_runs(self, sweep: str | None = None) -> list[dict]:
        if not self.runs_dir.exists():
            return []
        out = []
        for d in sorted(self.runs_dir.iterdir()):
            if d.name.startswith(".") or not d.is_dir():
                continue
            rec = self.read_run(d.name)
            if rec is None:
                continue
            if sweep is None or rec.get("sweep_id") == sweep:
                out.append(rec)
        return out

    # ---- sweeps ----------------------------------------------------------------------------
    def write_sweep(self, sweep: dict) -> None:
        atomic_write_json(self.sweeps_dir / f"{sweep['sweep_id']}.json", sweep)

    def read_sweep(self, sweep_id: str) -> dict | None:
        path = self.sweeps_dir / f"{sweep_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def list_sweeps(self) -> list[dict]:
        if not self.sweeps_dir.exists():
            return []
        return [json.loads(p.read_text()) for p in sorted(self.sweeps_dir.glob("*.json"))]

    # ---- advice trials (perfbench advise --try) ----------------------------------------------
    @property
    def advice_trials_path(self) -> Path:
        return self.root / "advice" / "trials.jsonl"

    def append_advice_trials(self, rows: list[dict]) -> None:
        """Add rows to the advice trials table (rewritten atomically: a reader never sees half a row)."""
        if not rows:
            return
        path = self.advice_trials_path
        old = path.read_bytes() if path.exists() else b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        new = "".join(json.dumps(r, sort_keys=True, default=_json_default) + "\n" for r in rows).encode()
        atomic_write_bytes(path, old + new)

    # ---- baselines -------------------------------------------------------------------------
    def write_baseline(self, name: str, baseline: dict) -> None:
        atomic_write_json(self.baselines_dir / f"{name}.json", baseline)

    def read_baseline(self, name: str) -> dict | None:
        path = self.baselines_dir / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def list_baselines(self) -> list[str]:
        return sorted(p.stem for p in self.baselines_dir.glob("*.json")) if self.baselines_dir.exists() else []
