"""workloads/pinning.py: a rank pinned to one core joins the cluster on its parent's CPUs and is pinned back after.

Checked on real OS threads in a child process started under `taskset -c 0` (what `msrun --bind_core` does); no
MindSpore. The speed-up itself is measured with real msrun launches, not here: `bench/bench_cluster_join.py`
(docs/benchmarks.md, "Cluster join")."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import json, os, threading, time
    from workloads.pinning import widened_for_join

    def affinities():
        return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})

    stop = threading.Event()
    before = threading.Thread(target=stop.wait)  # a thread that exists before the join
    before.start()
    out = {"own": sorted(os.sched_getaffinity(0))}
    with widened_for_join() as widened:
        during = threading.Thread(target=stop.wait)  # a thread started during the join (heartbeat, event loop)
        during.start()
        out["widened"] = widened
        out["inside"] = affinities()
    out["after"] = affinities()
    out["threads"] = len(os.listdir("/proc/self/task"))
    stop.set()
    print(json.dumps(out))
""")


def _child(prefix):
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run([*prefix, sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset and at least 2 CPUs"
)
def test_a_pinned_process_joins_on_the_parents_cpus_and_every_thread_is_pinned_back():
    parent = sorted(os.sched_getaffinity(0))
    out = _child(["taskset", "-c", "0"])
    assert out["own"] == [0]
    assert out["widened"] is True
    assert out["inside"] == [parent]  # every thread, including the one started before, may use all CPUs
    assert out["after"] == [[0]]  # and all of them, including the one started inside, are back on core 0
    assert out["threads"] == 3


def test_an_unpinned_process_is_left_alone():
    out = _child([])
    assert out["widened"] is False
    assert out["own"] == sorted(os.sched_getaffinity(0))
    assert out["after"] == [out["own"]]
