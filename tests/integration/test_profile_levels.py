"""profile.level on real MindSpore runs (msrun, 1 rank, tiny ResNet): what each level writes, that
analyzers.parsers.cpu parses every level's output, and that MindSpore's own parse never runs inside the loop."""

from __future__ import annotations

import pytest

from analyzers.parsers.cpu.parser import parse
from tests.integration.test_workload_resnet50 import launch

pytestmark = [pytest.mark.msrun, pytest.mark.timeout(900)]

ONE_RANK = {"world_size": 1, "train": {"steps": 6, "warmup_steps": 1}, "profile": {"enabled": True, "steps": 2}}


LEVELS = ["light", "full"]


@pytest.fixture(scope="module")
def level_runs(tmp_path_factory):
    """One run per level, both launched at once: they check which files each level writes, not times."""
    from concurrent.futures import ThreadPoolExecutor

    out = tmp_path_factory.mktemp("levels")

    def go(level):
        over = {**ONE_RANK, "profile": {**ONE_RANK["profile"], "level": level}}
        return launch(out, f"lvl-{level}", over, timeout_s=480)  # two share the cores

    with ThreadPoolExecutor(len(LEVELS)) as pool:
        return dict(zip(LEVELS, pool.map(go, LEVELS)))


@pytest.mark.parametrize("level", LEVELS)
def test_level_writes_parseable_framework_files(level_runs, level):
    import pandas as pd

    run = level_runs[level]
    assert run.res.status == "ok", run.res.log_tail
    assert run.meta(0)["profile_level"] == level
    d = run.profile_dir(0)
    framework = {p.name for p in (d / "FRAMEWORK").iterdir()}
    assert "cpu_op_execute_timestamp_0.txt" in framework  # what analyzers.parsers.cpu reads
    trace_view = d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    if level == "light":  # no MindSpore parse at all
        assert not trace_view.exists()
        assert "cpu_ms_memory_record_0.txt" not in framework
    else:  # full: memory recorded, MindSpore's parse after the last step (not at the end of the window)
        assert "cpu_ms_memory_record_0.txt" in framework
        assert trace_view.exists()
        last_step_end = run.steps(0)[-1]["end_ts"]
        assert trace_view.stat().st_mtime > last_step_end
    steps = pd.DataFrame(run.steps(0))
    prof = parse(run.art / "profile", workload_steps=steps, meta={"world_size": 1})
    profiled = set(steps.loc[steps["profiled"], "step"])
    assert profiled == {1, 2}
    assert len(prof.ops) > 0 and set(prof.ops["step"].dropna().astype(int)) == profiled
