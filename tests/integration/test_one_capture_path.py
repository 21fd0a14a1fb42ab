"""One capture path: a reference workload (workloads/runner.py) and a user's MindSpore script (captured by
perfbench.capture in its bootstrap), both real msrun runs with the same train/profile settings, leave the same
records: the step records' keys in the contract's order, the same profiler window (which steps are profiled, the
profiler's files), meta files with the same keys (but for each side's own, listed here), and the same store
tables with the same columns. A difference in either path fails here."""

from __future__ import annotations

import json
import re

import pytest

from perfbench.capture.writer import STEP_EXTRA_KEYS, STEP_KEYS
from perfbench.store import Store
from tests.integration.test_launcher_failures import SMALL
from tests.support import ROOT, run_perfbench, two_at_a_time, write_yaml

pytestmark = pytest.mark.msrun

TRAIN = {"batch_size": 4, "steps": 5, "warmup_steps": 1}
PROFILE = {"enabled": True, "steps": 2, "level": "default"}
#: meta keys only the reference runner's loop writes (beside the workload's own) and only a script's capture writes
RUNNER_ONLY = {"ms_threads", "mode", "os_threads", "startup", "steps", "framework_peak_allocated_bytes", "comm_backend"}
SCRIPT_ONLY = {"framework", "script", "argv", "installed_ts"}  # installed_ts: when the bootstrap hooked in


def records(store: Store, run: dict) -> tuple[list[dict], dict]:
    metrics = store.artifacts_dir(run["run_id"]) / "metrics"
    steps = [json.loads(ln) for ln in (metrics / "rank0.steps.jsonl").read_text().splitlines()]
    return steps, json.loads((metrics / "rank0.meta.json").read_text())


def profile_files(store: Store, run: dict) -> set[str]:
    """The profiler's output, as file kinds: the path under the run's `*_ascend_ms/` folder with every number
    taken out (`FRAMEWORK/cpu_op_detail_info_N.csv`, `ASCEND_PROFILER_OUTPUT/trace_view.json`, ...)."""
    root = store.artifacts_dir(run["run_id"]) / "profile"
    out = set()
    for f in root.rglob("*"):
        if f.is_file():
            parts = f.relative_to(root).parts
            out.add(re.sub(r"\d+", "N", "/".join(parts[1:] if parts[0].endswith("_ascend_ms") else parts)))
    return out


def test_the_reference_runner_and_perfbench_capture_write_the_same_records(tmp_path):
    results = tmp_path / "results"
    ref = write_yaml(
        tmp_path / "ref.yaml",
        dict(SMALL, name="ref", train=TRAIN, profile=PROFILE, sweep={"world_size": [1]}),
    )
    script = write_yaml(
        tmp_path / "script.yaml",
        {
            "name": "script",
            "workload": "script",
            "script": {
                "path": str(ROOT / "examples" / "own-job" / "train_mindspore.py"),
                "framework": "mindspore",
                "args": ["--batch-size", "{train.batch_size}", "--steps", "{train.steps}", "--hidden", "16"],
            },
            "train": TRAIN,
            "profile": PROFILE,
            "sweep": {"world_size": [1]},
        },
    )
    # two at a time into one results folder (each run and sweep is its own file): the test compares keys, profiler
    # windows and files, not times
    two_at_a_time(lambda cfg: run_perfbench("sweep", cfg, "--results", results, timeout=600), (ref, script))
    store = Store(results)
    runs = {r["config"]["workload"]: r for r in store.list_runs()}
    a, b = runs["resnet50"], runs["script"]
    assert a["status"] == "ok" and b["status"] == "ok", (a.get("error"), b.get("error"))
    a_steps, a_meta = records(store, a)
    b_steps, b_meta = records(store, b)

    # steps: the same steps, the same profiled window, the contract's keys in its order on both sides
    assert [s["step"] for s in a_steps] == [s["step"] for s in b_steps] == list(range(5))
    assert [s["profiled"] for s in a_steps] == [s["profiled"] for s in b_steps] == [False, True, True, False, False]
    contract = [*STEP_KEYS, *STEP_EXTRA_KEYS]
    for s in (a_steps[0], b_steps[0]):
        assert list(s)[: len(contract)] == contract, list(s)
    # capture_s (the profiler's call after a step) while the window runs; the rest are the workload's own extras
    assert {k for s in a_steps for k in s} & {"capture_s"} == {k for s in b_steps for k in s} & {"capture_s"}
    assert {s["samples"] for s in a_steps} == {s["samples"] for s in b_steps} == {4}

    # meta: every key a script's capture writes, the runner writes too (the runner adds its loop's and the
    # workload's own: its layout, collectives and model sizes)
    assert set(b_meta) - set(a_meta) <= SCRIPT_ONLY, set(b_meta) - set(a_meta)
    assert RUNNER_ONLY <= set(a_meta)
    for key in ("profiled_steps", "profile_level", "warmup_steps", "finished", "exit_status", "recorded_steps"):
        assert a_meta[key] == b_meta[key], key
    assert a_meta["profiled_steps"] == [1, 2] and a_meta["capture"] == "runner"
    assert b_meta["capture"] == "mindspore-callback"

    # the profiler window: the same kinds of files, and the same store tables and columns
    assert profile_files(store, a) == profile_files(store, b)
    assert {"FRAMEWORK/cpu_op_detail_info_N.csv", "ASCEND_PROFILER_OUTPUT/trace_view.json"} <= profile_files(store, a)
    a_tables, b_tables = ({f.stem for f in (store.run_dir(r["run_id"]) / "tables").glob("*.parquet")} for r in (a, b))
    # memory_attribution splits the peak by the model's parameter and optimizer sizes, which a reference workload
    # writes into its meta (a script's are not known)
    assert b_tables <= a_tables and a_tables - b_tables <= {"memory_attribution"}, a_tables ^ b_tables
    for table in ("workload_steps", "step_breakdown"):
        assert set(store.read_table(a["run_id"], table).columns) >= set(store.read_table(b["run_id"], table).columns)
    assert sorted(store.read_table(b["run_id"], "step_breakdown")["step"].unique()) == [1, 2]

    # the views read the script's run as they read the reference one: show, advise, and the dashboard's data layer
    # and Run page (step times per rank, the profiled steps' breakdown)
    shown = " ".join(run_perfbench("show", b["run_id"], "--results", results).stdout.split())
    assert b["run_id"] in shown and "step" in shown
    advised = run_perfbench("advise", b["run_id"], "--results", results, check=False)
    assert advised.returncode == 0, advised.stderr
    from dashboards import data
    from dashboards.pages import run as run_page

    data.configure(results)
    dash = data.get()
    assert {r["run_id"] for r in dash.runs()} == {a["run_id"], b["run_id"]}
    times = dash.step_times_per_rank(b["run_id"])
    assert times is not None and len(times) > 0
    a_bd, b_bd = dash.breakdown_per_rank(a["run_id"]), dash.breakdown_per_rank(b["run_id"])
    assert b_bd is not None and len(b_bd) and list(b_bd.columns) == list(a_bd.columns)
    page = str(run_page.layout(b["run_id"]))
    assert b["run_id"] in page and "Traceback" not in page
