"""The run record (`runs/<run_id>/run.json`), typed: one model for every road into the store (sweep,
analyze, tune). Fields beyond these are kept (extra="allow"); `metrics` may only hold metrics of the
catalogue (analyzers/catalogue.py), so a number cannot enter the store without its one definition."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from analyzers.catalogue import METRICS

SOURCES = ("sweep", "analyze", "tune", "advise", "ab")


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_id: str
    sweep_id: str | None = None
    source: Literal["sweep", "analyze", "tune", "advise", "ab"] = "sweep"
    status: Literal["planned", "running", "ok", "failed", "pruned"]
    error: str | None = None
    settings: dict = {}
    config: dict = {}
    config_key: str | None = None
    env: dict = {}
    timings: dict = {}
    metrics: dict[str, float | int | None] = {}
    warnings: list[str] = []
    #: analyses that did not run and why (a missing input)
    skipped_analyses: dict[str, str] = {}

    @field_validator("metrics")
    @classmethod
    def _catalogued(cls, v: dict) -> dict:
        unknown = sorted(set(v) - set(METRICS))
        if unknown:
            raise ValueError(f"metrics not in the catalogue (analyzers/catalogue.py): {unknown}")
        return v


def validate(record: dict) -> dict:
    """The record as stored: checked against RunRecord, unknown extra fields kept as they are."""
    return RunRecord.model_validate(record).model_dump(mode="json")
