"""A pinned rank joins the cluster on all of its parent's CPUs, then trains on its own core again.

`msrun --bind_core` pins each rank to one core (`taskset -c i python ...`) before Python starts, which is what
keeps a rank's MindSpore threads on its core while it trains (docs/workloads.md). But MindSpore's cluster join,
`init()`, is slow on one core: the worker's TCP client gives a new connection to the scheduler a few tens of
milliseconds to be marked connected by its event-loop thread, and on a single core shared with the process's
other threads it often is not, so the worker retries every 0.5 s. Measured on this machine, idle, bare
`init()` of 2 ranks (tests/unit/test_pinning.py names the command; docs/benchmarks.md "Cluster join"): pinned
14-31 s per rank and 27-42 s per launch; the same ranks joining on both cores 1-8 s and 9-15 s.

So the runner widens every thread of the process to its parent's CPU set (msrun's, which `--bind_core` leaves
unpinned; under Slurm the job's cpuset) for the join only, and pins every thread back afterwards: threads
started during the join (heartbeat, event loops) are pinned too, and later threads inherit the pin.
"""

from __future__ import annotations

import contextlib
import os


def _threads() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def set_process_affinity(cpus: set[int]) -> int:
    """Set the CPU affinity of every thread of this process (os.sched_setaffinity alone sets one thread's);
    returns how many threads were set (a thread that exited meanwhile is skipped)."""
    n = 0
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, cpus)
            n += 1
        except (ProcessLookupError, PermissionError):
            continue
    return n


@contextlib.contextmanager
def widened_for_join():
    """Inside: every thread may run on the parent's CPUs, when this process is pinned to fewer. Yields
    whether it widened anything; on the way out every thread is pinned back to the process's own CPUs."""
    try:
        own = os.sched_getaffinity(0)
        wide = os.sched_getaffinity(os.getppid())
    except (AttributeError, OSError):
        yield False
        return
    if not own < wide:
        yield False
        return
    set_process_affinity(wide)
    try:
        yield True
    finally:
        set_process_affinity(own)
