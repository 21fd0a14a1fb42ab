"""A run's processes: every process of one launch carries PERFBENCH_RUN_TAG (`TAG_VAR`) in its environment, so
ending a run kills every process that carries its tag (and every descendant of msrun seen while it ran), nothing
else: msrun starts its workers in sessions of their own, out of reach of a process-group kill. Used by the
launcher, the reaper (perfbench/run/reaper.py) and a sweep's clean-up of an earlier attempt (`kill_stale`)."""

from __future__ import annotations

import os
import signal

import psutil

from perfbench.startup import process_started

TAG_VAR = "PERFBENCH_RUN_TAG"


def _tagged(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid():
                continue
            if p.environ().get(TAG_VAR) == tag:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def kill_run(tag: str, known: dict[int, float] | None = None, grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL, every process of the run (by tag, plus known pid/create-time pairs)."""
    procs: dict[int, psutil.Process] = {p.pid: p for p in _tagged(tag)}
    for pid, created in (known or {}).items():
        if pid in procs:
            continue
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.01:
                procs[pid] = p
        except psutil.NoSuchProcess:
            pass
    terminate(list(procs.values()), grace_s)
    return len(procs)


def terminate(procs: list[psutil.Process], grace_s: float, kill_wait_s: float | None = None) -> None:
    """SIGTERM each process, SIGKILL those still alive after grace_s, then wait (kill_wait_s, default grace_s)."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s if kill_wait_s is None else kill_wait_s)


def kill_stale(run_id: str, rounds: int = 5) -> int:
    """Kill processes left by an earlier attempt of this run (e.g. a sweep killed with SIGKILL). Scans
    again until none is left: msrun may start a process (e.g. `tail -f` of a worker log when a worker
    dies) between one scan and its own death."""
    killed = 0
    for _ in range(rounds):
        stale = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and p.environ().get(TAG_VAR, "").startswith(f"{run_id}-"):
                    stale.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        if not stale:
            break
        for p in stale:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(stale, timeout=5)
        killed += len(stale)
    return killed


def remember_children(
    pid: int, known: dict[int, float], ranks: dict[int, int] | None = None, spawned: dict | None = None
) -> None:
    """Record msrun's descendants (pid → create time) and, the first time each is seen, which worker rank
    it is and (into `spawned`) when msrun, its scheduler and its workers were created."""
    try:
        for c in psutil.Process(pid).children(recursive=True):
            try:
                if c.pid not in known and ranks is not None:
                    env = c.environ()
                    role = env.get("MS_ROLE")
                    if role == "MS_WORKER" and env.get("MS_NODE_ID", "").isdigit():
                        ranks[c.pid] = int(env["MS_NODE_ID"])
                    if spawned is not None:
                        if role == "MS_WORKER" and env.get("MS_NODE_ID", "").isdigit():
                            # a rank's own children inherit its environment: the rank is the earliest of them
                            w = spawned.setdefault("workers", {})
                            ts = process_started(c.pid)
                            if ts is not None and (w.get(env["MS_NODE_ID"]) is None or ts < w[env["MS_NODE_ID"]]):
                                w[env["MS_NODE_ID"]] = ts
                        elif role == "MS_SCHED":
                            ts = process_started(c.pid)
                            if ts is not None and ts < spawned.get("scheduler", float("inf")):
                                spawned["scheduler"] = ts
                        elif c.ppid() == pid and "msrun" not in spawned:
                            spawned["msrun"] = process_started(c.pid)
                known.setdefault(c.pid, c.create_time())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                pass
    except psutil.NoSuchProcess:
        pass
