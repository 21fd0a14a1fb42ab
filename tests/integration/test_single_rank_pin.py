"""launch.bind_core true on a single rank (the CI model of `check --ab`): msrun --bind_core gives a single worker
every core, so the rank pins itself to the first one before MindSpore starts, and runs MindSpore's kernel and
dispatch pools at 1 thread; the default (auto) leaves a single rank on every core. Real msrun runs (1 rank, a few
steps); the affinity is the rank's own report (`os.sched_getaffinity` in its meta, after the cluster join)."""

from __future__ import annotations

import json
import os

import pytest

from perfbench.store import Store
from tests.support import run_perfbench, two_at_a_time, write_yaml

pytestmark = pytest.mark.msrun

CPUS = sorted(os.sched_getaffinity(0))


def _run(tmp_path, bind):
    cfg = {
        "name": f"pin-{bind}",
        "workload": "resnet50",
        "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
        "train": {"batch_size": 4, "steps": 4, "warmup_steps": 1},
        "profile": {"enabled": False, "steps": 1},
        "launch": {"bind_core": bind, "timeout_s": 300, "stall_timeout_s": 120},
        "sweep": {"world_size": [1]},
    }
    results = tmp_path / str(bind)
    run_perfbench("sweep", write_yaml(tmp_path / f"{bind}.yaml", cfg), "--results", results, timeout=600)
    (rec,) = Store(results).list_runs()
    assert rec["status"] == "ok", rec.get("error")
    meta = json.loads((results / "runs" / rec["run_id"] / "artifacts" / "metrics" / "rank0.meta.json").read_text())
    return rec, meta


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both runs, two at a time: what they check is each rank's affinity and thread settings, not times."""
    base = tmp_path_factory.mktemp("pin")
    binds = [True, "auto"]
    return dict(zip(binds, two_at_a_time(lambda bind: _run(base, bind), binds)))


@pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs to tell pinned from unpinned")
def test_bind_core_true_pins_a_single_rank_to_one_core(runs):
    rec, meta = runs[True]
    assert meta["affinity"] == [CPUS[0]]
    assert rec["config"]["threads_per_rank"] == 1 and meta["ms_threads"] == {"kernel_threads": 1, "dispatch_threads": 1}
    assert rec["env"]["bind_core"] is True


@pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs to tell pinned from unpinned")
def test_a_single_rank_keeps_every_core_by_default(runs):
    rec, meta = runs["auto"]
    assert meta["affinity"] == CPUS
    assert rec["config"]["threads_per_rank"] == len(CPUS) and meta["ms_threads"]["kernel_threads"] == "mindspore"
