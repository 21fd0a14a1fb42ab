"""Your own job: real msrun and torchrun sweeps of user scripts (examples/own-job and tests/integration/own_job),
checked against what the scripts did: steps, samples, and the collectives per step in the profile."""

from __future__ import annotations

import glob
import json
from collections import Counter
from pathlib import Path

import pytest

from perfbench.store import Store
from tests.support import BACKGROUND_VAR, ROOT, prefetched, run_perfbench, two_at_a_time, write_yaml

pytestmark = pytest.mark.msrun

HERE = Path(__file__).resolve().parent / "own_job"


def sweep(tmp_path: Path, name: str, cfg: dict, env: dict | None = None) -> tuple[Store, list[dict]]:
    path = write_yaml(tmp_path / f"{name}.yaml", dict(cfg, name=name))
    results = tmp_path / f"results-{name}"
    r = run_perfbench("sweep", path, "--results", results, check=False, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(results)
    (sw,) = [s for s in store.list_sweeps() if s.get("name") == name]
    runs = [store.read_run(rid) for rid in sw["runs"]]
    return store, runs


def steps_of(store: Store, run: dict) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for f in sorted((store.artifacts_dir(run["run_id"]) / "metrics").glob("rank*.steps.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["rank"], []).append(rec)
    return out


def prefetch_runs(tmp_path_factory) -> dict:
    """The sweeps and the search, started in the background when the session collected this module
    (tests/conftest.py)."""
    return _own_sweeps(tmp_path_factory, {BACKGROUND_VAR: "1"})


@pytest.fixture(scope="module")
def own_sweeps(tmp_path_factory) -> dict:
    return prefetched(__name__, _own_sweeps, tmp_path_factory)


def _own_sweeps(tmp_path_factory, env: dict | None = None) -> dict:
    """The three sweeps of the two tests below and the search of the tune test, two at a time, each in its own
    results folder: they check steps, samples, collective counts, failure reasons and the search's trials (the pick
    against the trials' own values), not times."""
    base = tmp_path_factory.mktemp("own_job")
    report = base / "report"  # where train_torch_capture.py writes what each rank did
    report.mkdir()
    configs = {
        "ms": {
            "workload": "script",
            "script": {
                "path": str(ROOT / "examples" / "own-job" / "train_mindspore.py"),
                "framework": "mindspore",
                "args": ["--batch-size", "{train.batch_size}", "--steps", "{train.steps}", "--hidden", "32"],
            },
            "train": {"batch_size": 8, "steps": 6, "warmup_steps": 2},
            "profile": {"steps": 2},
            "sweep": {"world_size": [2]},
        },
        "pt": {
            "workload": "script",
            "script": {
                "path": str(HERE / "train_torch_capture.py"),
                "framework": "pytorch",
                "args": ["--batch-size", "{train.batch_size}", "--steps", "{train.steps}", "--report", str(report)],
            },
            "train": {"batch_size": 8, "steps": 6, "warmup_steps": 1},
            "profile": {"steps": 2},
            "sweep": {"world_size": [2]},
        },
        "broken": {
            "workload": "script",
            "script": {"path": str(HERE / "broken.py"), "framework": "pytorch", "args": ["--mode", "{knobs.mode}"]},
            "knobs": {"mode": "crash"},
            "train": {"steps": 6, "warmup_steps": 1},
            "profile": {"enabled": False},
            "sweep": {"world_size": [2], "knobs.mode": ["crash", "nosteps"]},
            "launch": {"timeout_s": 120},
        },
    }
    jobs = [*configs, "tune"]
    got = dict(
        zip(jobs, two_at_a_time(lambda n: _tune(base, env) if n == "tune" else sweep(base, n, configs[n], env), jobs))
    )
    return {**got, "report": report}


def _tune(tmp_path: Path, env: dict | None = None):
    """examples/own-job/tune-pytorch.yaml, 3 trials of 6 steps: (results folder, the finished `perfbench tune`)."""
    import yaml

    cfg = yaml.safe_load((ROOT / "examples" / "own-job" / "tune-pytorch.yaml").read_text())
    cfg["script"]["path"] = str(ROOT / "examples" / "own-job" / "train_pytorch.py")
    cfg["train"]["steps"] = 6
    cfg["search"]["budget"] = {"trials": 3}
    path = write_yaml(tmp_path / "tune.yaml", cfg)
    results = tmp_path / "results-tune"
    return results, run_perfbench("tune", path, "--results", results, "--json", check=False, timeout=900, env=env)


def test_plain_mindspore_script_under_msrun(own_sweeps):
    """examples/own-job/train_mindspore.py imports nothing of perfbench: its Model.train steps are found; its MLP has
    6 parameters and no fusion, so MindSpore's data parallel runs 6 AllReduce per step (read from the profile)."""
    store, (run,) = own_sweeps["ms"]
    assert run["status"] == "ok", run.get("error")
    steps = steps_of(store, run)
    assert sorted(steps) == [0, 1]
    for recs in steps.values():
        assert [r["step"] for r in recs] == list(range(6))
        assert {r["samples"] for r in recs} == {8}  # the dataset's batch size on each rank
        assert all(r["loss"] is not None for r in recs)
    assert run["capture"]["mode"] == "mindspore-callback"
    assert run["metrics"]["collectives_per_step"] == 6
    assert run["metrics"]["samples_per_step"] == 16


def test_pytorch_script_with_the_capture_line_and_a_failing_one(own_sweeps):
    """A DDP script using perfbench.capture (steps, samples, loss, apply_parallel) and, in the same sweep, a script
    that crashes on rank 1 at step 3 (failed, with the reason and its log) and one whose steps cannot be found
    (kept with its wall time and the reason). With comm_fusion 0 DDP puts each of the 4 parameters in its own
    bucket: 4 gloo all-reduces per profiled step on each rank, in each rank's Chrome trace."""
    report = own_sweeps["report"]
    store, runs = own_sweeps["pt"]
    (run,) = runs
    assert run["status"] == "ok", run.get("error")
    did = {int(Path(f).stem[4:]): json.loads(Path(f).read_text()) for f in glob.glob(str(report / "rank*.json"))}
    steps = steps_of(store, run)
    assert sorted(steps) == sorted(did) == [0, 1]
    for rank, recs in steps.items():
        assert [r["step"] for r in recs] == list(range(did[rank]["steps"]))
        assert {r["samples"] for r in recs} == {did[rank]["batch_size"]}
        assert all(isinstance(r["loss"], float) for r in recs)
        assert [r["profiled"] for r in recs] == [False, True, True, False, False, False]
    assert run["capture"]["mode"] == "manual"
    traces = sorted((store.artifacts_dir(run["run_id"]) / "profile").glob("rank*.pt.trace.json"))
    assert [t.name.split(".")[0] for t in traces] == ["rank0", "rank1"]
    for t in traces:
        events = json.loads(t.read_text())["traceEvents"]
        counts = Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("name") == "gloo:all_reduce")
        assert counts["gloo:all_reduce"] == 2 * did[0]["params"]  # 2 profiled steps x one bucket per parameter

    _, runs = own_sweeps["broken"]
    crash, nosteps = runs
    assert crash["status"] == "failed"
    assert crash["failed_rank"] == 1
    assert "rank 1 exited with code 1 after step 2 (torchrun exit code 1)" in crash["error"]
    assert "RuntimeError: boom at step 3" in crash["error"] and "boom at step 3" in crash["log_tail"]
    assert nosteps["status"] == "ok" and nosteps["launch"]["wall_s"] > 0
    assert "no step boundary was seen" in nosteps["no_steps_reason"]
    assert any("no steps recorded" in w for w in nosteps["warnings"])


def test_tune_a_script_on_a_user_knob_and_a_parallel_knob(own_sweeps):
    """examples/own-job/tune-pytorch.yaml, 3 trials of 6 steps: every trial is a torchrun run of the user's script
    with the trial's knobs.hidden and comm_fusion in its command line, and the answer names both knobs."""
    results, r = own_sweeps["tune"]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    answer = json.loads(r.stdout)
    assert len(answer["trials"]) == 3 and {t["status"] for t in answer["trials"]} == {"ok"}
    assert set(answer["importance"]) == {"knobs.hidden", "comm_fusion"}
    conf = answer["confirmation"]
    if conf is None:  # one contender: the best single trial, and the answer says why
        assert answer["confirmation_skipped"], answer
        assert answer["best"]["value"] == max(t["value"] for t in answer["trials"])
    else:  # the best two re-measured once each: the pick's median of its trial and its re-measurement
        (pick,) = [c for c in conf["candidates"] if c["number"] == conf["pick"]]
        assert len(conf["candidates"]) == 2 and all(len(c["runs"]) == 1 for c in conf["candidates"])
        assert answer["best"]["value"] == pick["median"]
    store = Store(results)
    for t in answer["trials"]:
        rec = store.read_run(t["run_id"])
        s = t["settings"]
        assert s["knobs.hidden"] in (128, 256, 512) and s["comm_fusion"] in (0, 1, 25)
        args = rec["config"]["script"]["args"]
        assert args[args.index("--hidden") + 1] == str(s["knobs.hidden"])
        assert float(args[args.index("--bucket-cap-mb") + 1]) == s["comm_fusion"]
        assert rec["capture"]["mode"] == "optimizer-hook" and rec["metrics"]["samples_per_step"] == 64
