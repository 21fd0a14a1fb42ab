"""The run record (`runs/<run_id>/run.json`), typed: one check for every road into the store (sweep,
analyze, tune). Fields beyond these are kept; `metrics` may only hold metrics of the catalogue
(analyzers/catalogue.py), so a number cannot enter the store without its one definition.

A plain check, not a pydantic model: every `perfbench analyze` writes a record, and pydantic's import and
model build cost that command ~0.1-0.2 s of start-up for a check of a dozen keys."""

from __future__ import annotations

import numbers
from typing import Any

from analyzers.catalogue import METRICS

SOURCES = ("sweep", "analyze", "tune", "advise", "ab")
STATUSES = ("planned", "running", "ok", "failed", "pruned")

#: optional fields: (accepted types, default as stored when absent)
_FIELDS: dict[str, tuple[tuple[type, ...], Any]] = {
    "sweep_id": ((str, type(None)), None),
    "error": ((str, type(None)), None),
    "settings": ((dict,), {}),
    "config": ((dict,), {}),
    "config_key": ((str, type(None)), None),
    "env": ((dict,), {}),
    "timings": ((dict,), {}),
    "metrics": ((dict,), {}),
    "warnings": ((list,), []),
    #: analyses that did not run and why (a missing input)
    "skipped_analyses": ((dict,), {}),
}


def check(record: Any) -> None:
    """Raise ValueError naming the field when `record` is not a run record: `run_id` a string, `status` one of
    STATUSES, `source` (default "sweep") one of SOURCES, the other known fields of their type, every metric
    catalogued and a number or null, every warning and skipped analysis's reason a string."""
    if not isinstance(record, dict):
        raise ValueError(f"run record: expected an object, got {type(record).__name__}")
    if not isinstance(record.get("run_id"), str):
        raise ValueError(f"run record: run_id must be a string, got {record.get('run_id')!r}")
    if record.get("status") not in STATUSES:
        raise ValueError(f"run record {record['run_id']}: status {record.get('status')!r} not one of {STATUSES}")
    if record.get("source", "sweep") not in SOURCES:
        raise ValueError(f"run record {record['run_id']}: source {record.get('source')!r} not one of {SOURCES}")
    for key, (types, _) in _FIELDS.items():
        if key in record and not isinstance(record[key], types):
            raise ValueError(
                f"run record {record['run_id']}: {key} must be {' or '.join(t.__name__ for t in types)}, "
                f"got {type(record[key]).__name__}"
            )
    metrics = record.get("metrics") or {}
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ValueError(f"metrics not in the catalogue (analyzers/catalogue.py): {unknown}")
    for k, v in metrics.items():
        if v is not None and not isinstance(v, numbers.Real):
            raise ValueError(f"run record {record['run_id']}: metric {k} must be a number or null, got {v!r}")
    for key in ("warnings", "skipped_analyses"):
        values = record.get(key) or ()
        if not all(isinstance(v, str) for v in (values.values() if isinstance(values, dict) else values)):
            raise ValueError(f"run record {record['run_id']}: {key} must hold strings")


def validate(record: dict) -> dict:
    """The record as stored: checked (`check`), the known fields that are absent filled with their defaults,
    unknown extra fields kept as they are."""
    check(record)
    out = {"source": "sweep", **{k: (d.copy() if isinstance(d, (dict, list)) else d) for k, (_, d) in _FIELDS.items()}}
    out.update(record)
    return out
