"""Helpers for the golden tests: run `perfbench analyze DIR --json --no-store` as a user would and
compare what it reports with numbers read from the profiler's own files (never from perfbench).

Tolerances: a breakdown part within 1% of its step time, a step time within 1% of itself,
per-op communication numbers within 1%; a number the files do not give must be null (None)."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

from tests.support import perfbench_in_process

#: breakdown parts: |perfbench - profiler| <= REL * step time; step times and per-op numbers: <= REL * value
REL = 0.01
BREAKDOWN = (
    "computing_us",
    "communication_us",
    "communication_not_overlapped_us",
    "overlapped_us",
    "free_us",
    "preparing_us",
    "bubble_us",
    "stage_us",
)


def analyze_json(path) -> dict:
    """`perfbench analyze PATH --json --no-store`, the real command line run in this process (the process-level
    behaviour, exit status and no traceback, is tested with `run_perfbench` in test_analyze_cli.py)."""
    return json.loads(perfbench_in_process("analyze", path, "--json", "--no-store").stdout)


def rows(path) -> list[dict]:
    """A profiler CSV as dicts, without MindSpore's trailing average row (step_num '-')."""
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r.get("step_num", "") != "-"]


def reported_steps(doc: dict) -> dict[tuple[int, int], dict]:
    """(rank, step) -> the step's breakdown as `analyze --json` reports it."""
    return {(r["rank"], s["step"]): s for r in doc["ranks"] for s in r["steps"]}


def check_step(got: dict, want: dict, where: str) -> None:
    """`want`: every STEP field the profiler's files decide (a number, or None = the files do not say)."""
    step = want["step_us"]
    assert got["step_us"] is not None and abs(got["step_us"] - step) <= REL * step, (where, "step_us", got, want)
    for k in BREAKDOWN:
        if k not in want:
            continue
        if want[k] is None:
            assert got[k] is None, (where, k, got[k], "the profiler's files do not give it: must be null")
        else:
            assert got[k] is not None and abs(got[k] - want[k]) <= REL * step, (where, k, got[k], want[k])


def close(got, want, where="") -> None:
    assert got is not None and abs(got - want) <= REL * abs(want), (where, got, want)


def median_of_slowest(step_us: dict[tuple[int, int], float]) -> float:
    """The catalogue's step_time_s of an imported profile: per step the slowest rank's step time, median over steps."""
    per_step: dict[int, float] = {}
    for (rank, step), v in step_us.items():
        per_step[step] = max(per_step.get(step, 0.0), v)
    return statistics.median(per_step.values())


#: nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md), n = ranks in the group
def busbw_factor(op_type: str, n: int) -> float:
    if op_type == "allreduce":
        return 2 * (n - 1) / n
    if op_type in ("allgather", "reducescatter", "alltoall", "alltoallv"):
        return (n - 1) / n
    return 1.0


def copy_loose_files(src: Path, dst: Path) -> Path:
    """Copy only the files directly in `src` (not its sub-folders, e.g. PROF_* jobs) into a new folder `dst`."""
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file():
            shutil.copy2(p, dst / p.name)
    return dst
