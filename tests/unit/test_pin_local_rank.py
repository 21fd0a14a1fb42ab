"""torchrun has no --bind_core: with launch.bind_core true the capture bootstrap pins each local rank to a CPU of
its own (perfbench/capture/run.py). Checked on this process's own affinity, restored afterwards."""

from __future__ import annotations

import os

import pytest

from perfbench.capture.run import pin_local_rank


@pytest.fixture
def affinity():
    before = os.sched_getaffinity(0)
    yield sorted(before)
    os.sched_setaffinity(0, before)


def test_local_rank_i_gets_the_ith_cpu_wrapping(affinity):
    cpus = ",".join(str(c) for c in affinity)
    last = len(affinity) - 1
    assert pin_local_rank({"PERFBENCH_BIND_CORES": cpus, "LOCAL_RANK": str(last)}) == affinity[last]
    assert os.sched_getaffinity(0) == {affinity[last]}
    # one more local rank than CPUs: back to the first
    assert pin_local_rank({"PERFBENCH_BIND_CORES": cpus, "LOCAL_RANK": str(len(affinity))}) == affinity[0]
    assert os.sched_getaffinity(0) == {affinity[0]}


def test_nothing_pinned_unless_asked(affinity):
    assert pin_local_rank({"LOCAL_RANK": "0"}) is None
    assert pin_local_rank({"PERFBENCH_BIND_CORES": "0"}) is None  # not under torchrun: no LOCAL_RANK
    assert pin_local_rank({"PERFBENCH_BIND_CORES": "99999", "LOCAL_RANK": "0"}) is None  # no such CPU
    assert os.sched_getaffinity(0) == set(affinity)
