"""The embedded store: runs, their per-step metrics and analysis tables, under one results folder.

Layout (nothing to start; plain files that pandas, DuckDB or a shell can read):

    <results>/
      runs/<run_id>/run.json           the run record: settings, status, env, timings, summary metrics
      runs/<run_id>/tables/<name>.parquet   per-step metrics and analysis tables (analyzers.schema)
      runs/<run_id>/artifacts/         raw artifacts: msrun logs, metrics files, profiler output
      sweeps/<sweep_id>.json           a sweep's config and its run ids
      baselines/<name>.json            saved baselines for `perfbench check`
      advice/trials.jsonl              `perfbench advise RUN --try N`: one row per tried finding, predicted
                                       next to measured gain (read_advice_trials; docs/advice.md)

Atomicity: every file is written to a temporary name in the same folder and renamed into place.
`run.json` is the commit point of a run: tables are written first, the record with its final status
last, so a killed sweep leaves at worst a run whose record says "running" (or no record), which
`sweep --resume` re-runs from scratch. Readers never see a half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Iterable

import pandas as pd

from perfbench.errors import UserError
from perfbench.records import (  # noqa: F401  (re-exported: the store's JSON side lives in perfbench/records.py)
    FINISHED,
    AmbiguousRun,
    Records,
    RunNotFound,
    _json_default,
    atomic_write_bytes,
    atomic_write_json,
    short_id,
)
from perfbench.run.record import check as check_record


class Store(Records):
    """The store: run records, sweeps and baselines (perfbench.records.Records) and the runs' Parquet tables."""

    def write_run(self, record: dict) -> None:
        """Write (or replace) a run record atomically, after checking it against the typed record
        (perfbench.run.record.check: known status and source, catalogued metrics only)."""

        check_record(record)
        atomic_write_json(self.run_dir(record["run_id"]) / "run.json", record)

    def write_table(self, run_id: str, name: str, df: pd.DataFrame) -> None:
        path = self.table_path(run_id, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{name}.", suffix=".tmp")
        os.close(fd)
        try:
            _to_parquet(df, tmp)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def delete_table(self, run_id: str, name: str) -> None:
        """Remove the run's table `name` if it is there (a damaged cache about to be computed again)."""
        self.table_path(run_id, name).unlink(missing_ok=True)

    def read_table(self, run_id: str, name: str) -> pd.DataFrame | None:
        path = self.table_path(run_id, name)
        if not path.exists():
            return None
        try:
            return pd.read_parquet(path)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError; a truncated file an OSError
            raise DamagedTableError(path, e) from None

    def damaged_tables(self, run_id: str) -> list[str]:
        """One line per stored table of the run that cannot be read back (its Parquet footer unreadable: truncated,
        overwritten), naming its file as DamagedTableError does; [] when every table reads."""
        import pyarrow.parquet as pq

        out = []
        for name in self.table_names(run_id):
            path = self.table_path(run_id, name)
            try:
                pq.read_metadata(path)
            except (OSError, ValueError) as e:
                out.append(str(DamagedTableError(path, e)))
        return out

    def read_advice_trials(self) -> pd.DataFrame:
        """Every `advise --try` result kept so far, oldest first (empty frame when none)."""
        path = self.advice_trials_path
        if not path.exists():
            return pd.DataFrame()
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        return pd.DataFrame(rows)


class DamagedTableError(UserError):
    """A stored table that cannot be read back (truncated, overwritten): the message names its file."""

    def __init__(self, path, cause: Exception):
        why = (str(cause).splitlines() or [type(cause).__name__])[0].split(". ")[0]
        super().__init__(
            f"{path}: damaged table ({why}); the run's other files are intact: import or run it again to rebuild it"
        )
        self.path = str(path)


def _to_parquet(df: pd.DataFrame, path: str) -> None:
    df = df.copy()
    for col in df.columns:  # mixed-type object columns (lists, dicts) are stored as JSON text
        if df[col].dtype == object:
            sample = df[col].dropna()
            if len(sample) and not all(isinstance(v, str) for v in sample.head(50)):
                df[col] = df[col].map(
                    lambda v: v if v is None or isinstance(v, str) else json.dumps(v, default=_json_default)
                )
    df.to_parquet(path, index=False)


def flatten_runs(records: Iterable[dict]) -> pd.DataFrame:
    """One row per run: run_id, sweep_id, status, settings.* and metrics.* as columns."""
    rows = []
    for r in records:
        row = {k: r.get(k) for k in ("run_id", "sweep_id", "status", "error", "source")}
        for k, v in (r.get("settings") or {}).items():
            row[f"settings.{k}"] = v
        for k, v in (r.get("metrics") or {}).items():
            row[f"metrics.{k}"] = v
        rows.append(row)
    return pd.DataFrame(rows)
