"""Where a run's time goes before its first step: one timeline from the launcher's and the ranks' own clocks.

Every timestamp is ``time.time()`` seconds (Unix epoch) on one host. Sources:

* the launcher (``run.json`` ``launch.startup``): when it started msrun, and when msrun, its scheduler and
  its workers were created (from /proc, see :func:`process_started`);
* each rank's meta (``metrics/rank{R}.meta.json`` ``startup``): ``process`` (created), ``entry`` (the first
  line of workloads/entry.py ran), ``imported`` (``import mindspore`` and its context set), ``init``
  (``mindspore.communication.init()`` returned: the cluster is built), ``built`` (the workload's model is
  built, compiled and every rank passed the compile barrier), plus ``compile_s`` /
  ``compile_barrier_wait_s`` from the workload;
* the scheduler's ``metrics/scheduler.startup.json`` (``process``, ``entry``, ``imported``);
* the first step's ``start_ts`` (``rank{R}.steps.jsonl``).

:func:`phases` turns one run's timestamps into consecutive phases (seconds), the slowest rank's view:
the run's start-up ends when its last rank starts step 0.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

#: what the launcher tells a rank's process at start: for a single local rank it pins (launch.bind_core true;
#: msrun --bind_core gives a single worker every core), the CPU the rank pins itself to before MindSpore starts
PIN_VAR = "PERFBENCH_PIN_CORE"

#: consecutive phases from the launcher's start to the first step, in order (name, what it is)
PHASES = (
    ("msrun_start", "launcher → msrun process created (the reaper's Python start)"),
    ("msrun_import", "msrun created → scheduler created (msrun imports mindspore, then spawns)"),
    ("spawn", "scheduler created → last worker created"),
    ("python_start", "worker created → first line of entry.py (interpreter start)"),
    ("import_mindspore", "entry.py → `import mindspore` done and the context set"),
    ("init", "mindspore imported → communication init() returned (scheduler rendezvous, MCCL)"),
    ("build", "init → model built (without compile and barrier)"),
    ("compile", "graph compile of the train step (the workload's compile_s)"),
    ("barrier", "compile barrier: waiting for the slowest rank's compile"),
    ("to_first_step", "model built → step 0 starts (profiler, checkpoints, data)"),
)


def process_started(pid: int | str = "self") -> float | None:
    """When a process was created, as time.time() seconds: /proc/PID/stat's start (clock ticks after boot)
    plus the boot time taken from /proc/uptime (0.01 s resolution; /proc/stat's btime, which psutil uses,
    is whole seconds). None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError):
        return None
    now = time.time()
    ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22 (starttime), counted after the comm's ")"
    return now - uptime + ticks / os.sysconf("SC_CLK_TCK")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _first_steps(metrics_dir: Path) -> dict[int, float]:
    out = {}
    for f in metrics_dir.glob("rank*.steps.jsonl"):
        try:
            first = json.loads(f.open().readline())
            out[int(first["rank"])] = float(first["start_ts"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def phases(record: dict, metrics_dir: Path) -> dict[str, float | None]:
    """One run's start-up as consecutive phases (seconds; None where a timestamp is missing) along its
    critical path: the rank that finished compiling last (the one every other rank waited for at the
    compile barrier). Adds `total` (launcher → the last rank's step 0) and `first_step_s` (the slowest
    rank's step 0)."""
    launch = (record.get("launch") or {}).get("startup") or {}
    metas = {}
    for f in metrics_dir.glob("rank*.meta.json"):
        m = _read_json(f)
        if m.get("startup"):
            metas[int(m.get("rank", 0))] = m
    sched = _read_json(metrics_dir / "scheduler.startup.json")
    first = _first_steps(metrics_dir)
    t0 = launch.get("launched") or (record.get("timings") or {}).get("started")

    def compiled(m):
        b = m["startup"].get("built")
        return None if b is None else b - float(m.get("compile_barrier_wait_s") or 0.0)

    done = {r: compiled(m) for r, m in metas.items() if compiled(m) is not None}
    crit = max(done, key=done.get) if done else (min(metas) if metas else None)
    m = metas.get(crit, {"startup": {}})
    st = m["startup"]
    workers = launch.get("workers") or {}
    built = [x["startup"]["built"] for x in metas.values() if x["startup"].get("built") is not None]
    compile_s = float(m.get("compile_s") or 0.0)
    marks = {
        "launched": t0,
        "msrun": launch.get("msrun"),
        "scheduler": launch.get("scheduler") or sched.get("process"),
        "worker": workers.get(str(crit), st.get("process")),
        "entry": st.get("entry"),
        "imported": st.get("imported"),
        "init": st.get("init"),
        "compile_start": done[crit] - compile_s if crit in done else None,
        "compiled": done.get(crit),
        "built": max(built) if built else None,
        "first_step": max(first.values()) if first else None,
    }

    def span(a, b):
        return round(marks[b] - marks[a], 3) if marks.get(a) is not None and marks.get(b) is not None else None

    out = {
        "msrun_start": span("launched", "msrun"),
        "msrun_import": span("msrun", "scheduler"),
        "spawn": span("scheduler", "worker"),
        "python_start": span("worker", "entry"),
        "import_mindspore": span("entry", "imported"),
        "init": span("imported", "init"),
        "build": span("init", "compile_start"),
        "compile": span("compile_start", "compiled"),
        "barrier": span("compiled", "built"),
        "to_first_step": span("built", "first_step"),
        "total": span("launched", "first_step"),
        "critical_rank": crit,
    }
    steps0 = []
    for f in metrics_dir.glob("rank*.steps.jsonl"):
        try:
            steps0.append(float(json.loads(f.open().readline())["step_time_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    out["first_step_s"] = round(max(steps0), 3) if steps0 else None
    return out
