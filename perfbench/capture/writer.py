"""The per-rank record files every capture path writes (docs/architecture.md, "Contract: launcher -> workload"):
`metrics/rank{R}.steps.jsonl` (one JSON object per finished step, appended and flushed, so a crashed rank
leaves every finished step behind) and `metrics/rank{R}.meta.json` (rewritten whole, atomically). The
reference runner (workloads/runner.py) and `perfbench.capture` write through these functions.

Standard library only: a user's script imports this without pandas or a framework.
"""

from __future__ import annotations

import json
import os
import pathlib

#: keys every step record has (the reference runner's and perfbench.capture's alike)
STEP_KEYS = ("rank", "step", "start_ts", "end_ts", "step_time_s", "samples", "loss", "profiled")
#: keys every step record has beside STEP_KEYS: cpu_s, and (with memory sampling on) the two memory samples
STEP_EXTRA_KEYS = ("cpu_s", "max_rss_bytes", "rss_bytes")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_sample() -> dict:
    """This process's memory now, cheaply (~10 us: one getrusage and one small /proc read; docs/benchmarks.md):
    `max_rss_bytes` = the OS's high-water mark of the resident set since the process started (ru_maxrss, KiB on
    Linux), which catches peaks inside a step; `rss_bytes` = the resident set right now (/proc/self/statm).
    A value the OS does not give is None (unknown, not 0)."""
    import resource

    out: dict = {"max_rss_bytes": None, "rss_bytes": None}
    try:
        out["max_rss_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024 or None
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/self/statm", "rb") as fh:
            out["rss_bytes"] = int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    return out


def machine_memory_bytes() -> int | None:
    """The machine's total memory (MemTotal of /proc/meminfo), or None where it cannot be read."""
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def open_records(metrics_dir: pathlib.Path, rank: int, kind: str = "steps"):
    """The rank's `rank{R}.{kind}.jsonl`, opened for appending (line-buffered)."""
    metrics_dir.mkdir(parents=True, exist_ok=True)
    return open(metrics_dir / f"rank{rank}.{kind}.jsonl", "a", buffering=1)


def append_record(fh, rec: dict, sync: bool = True) -> None:
    """One record as one line, flushed (and fsynced: a rank killed right after still leaves it)."""
    fh.write(json.dumps(rec) + "\n")
    fh.flush()
    if sync:
        os.fsync(fh.fileno())


def write_meta(metrics_dir: pathlib.Path, rank: int, meta: dict) -> None:
    """`rank{R}.meta.json`, replaced atomically (a reader never sees half a file)."""
    metrics_dir.mkdir(parents=True, exist_ok=True)
    path = metrics_dir / f"rank{rank}.meta.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=1, default=str))
    os.replace(tmp, path)


def meta_finished(metrics_dir: pathlib.Path, rank: int) -> bool:
    """Whether rank `rank`'s meta says `finished: true` (its last write, Recorder.finish); False when the file is
    missing or half-read."""
    try:
        return bool(json.loads((metrics_dir / f"rank{rank}.meta.json").read_text()).get("finished"))
    except (OSError, ValueError):
        return False


def step_record(
    rank: int,
    step: int,
    start: float,
    end: float,
    samples: int | None,
    loss: float | None,
    profiled: bool,
    cpu_s: float | None,
    mem: dict | None,
) -> dict:
    """A step record in the contract's key order (extra keys are added by the caller)."""
    rec = {
        "rank": rank,
        "step": step,
        "start_ts": start,
        "end_ts": end,
        "step_time_s": end - start,
        "samples": samples,
        "loss": loss,
        "profiled": profiled,
        "cpu_s": cpu_s,
    }
    if mem is not None:
        rec.update(mem)
    return rec
