"""Launcher failure paths with real msrun: a crashing rank and a hanging rank each fail only their own
run, with a reason and the failing rank's log; no process is left behind; the next run still runs."""

from __future__ import annotations

import json
import os
import time

import psutil
import pytest

from perfbench.run.launcher import TAG_VAR
from perfbench.store import Store
from tests.support import BACKGROUND_VAR, perfbench_in_process, prefetched, run_perfbench, write_yaml

pytestmark = pytest.mark.msrun

SMALL = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 6, "warmup_steps": 1},
    "profile": {"enabled": False, "steps": 1},
}


def leftovers(results) -> list[str]:
    """Processes of ours still alive: tagged by the launcher, or running a config under `results`."""
    found = []
    # tags of this results dir's runs only (other tests on the machine use the same sweep names)
    ids = tuple(f"{r['run_id']}-" for r in Store(results).list_runs()) if (results / "runs").exists() else ()
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid == os.getpid():
                continue
            cmd = " ".join(p.info["cmdline"] or [])
            if str(results) in cmd or (ids and p.environ().get(TAG_VAR, "").startswith(ids)):
                found.append(f"{p.pid}: {cmd[:120]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def records(results) -> list[dict]:
    """`perfbench ls --json` in this process: the runs' data; the sweeps under test keep their own processes."""
    return json.loads(perfbench_in_process("ls", "--results", results, "--json").stdout)


def _crash_sweep(base, env: dict | None = None):
    """One real 2-rank sweep of two runs, shared by the crash test and the crash-at-exit test: rank 1 exits at
    step 2 (crash_rank 1), then a run whose rank 1 kills itself with SIGSEGV after its final meta
    (crash_at_exit_rank 1; the crash_rank 1 run never gets that far). The second run is also the one that
    shows the sweep went on after the failed run."""
    cfg = write_yaml(
        base / "crash.yaml",
        dict(
            SMALL,
            name="crash",
            inject={"crash_step": 2, "crash_at_exit_rank": 1},
            sweep={"world_size": [2], "crash_rank": [1, None]},
        ),
    )
    results = base / "results"
    r = run_perfbench("sweep", cfg, "--results", results, check=False, timeout=600, env=env)
    return results, r


def _hang_sweep(base, env: dict | None = None):
    """A 2-rank sweep whose first run hangs at step 2 on rank 1 (cut by the 15 s stall timeout), then a healthy run."""
    cfg = write_yaml(
        base / "hang.yaml",
        dict(
            SMALL,
            name="hang",
            inject={"hang_step": 2},
            launch={"stall_timeout_s": 15, "timeout_s": 400},
            sweep={"world_size": [2], "hang_rank": [1, None]},
        ),
    )
    results = base / "results"
    r = run_perfbench("sweep", cfg, "--results", results, check=False, timeout=800, env=env)
    return results, r


def _failure_sweeps(tmp_path_factory, env: dict | None = None) -> dict:
    """The crash sweep and the hang sweep, two at a time (as the loss-comparing runs of test_zero.py are): these
    tests check statuses, reasons, steps and processes, not times; each sweep has its own results folder."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        crash = pool.submit(_crash_sweep, tmp_path_factory.mktemp("crash_sweep"), env)
        hang = pool.submit(_hang_sweep, tmp_path_factory.mktemp("hang_sweep"), env)
        return {"crash": crash.result(), "hang": hang.result()}


def prefetch_runs(tmp_path_factory) -> dict:
    """The crash and hang sweeps, then the killed-sweep and killed-rank scenarios, started in the background when the
    session collected this module (tests/conftest.py): past their start-ups they mostly wait (the crashed rank's
    heartbeat timeout, the 15 s stall), and their tests check statuses, records, steps and processes, not times."""
    env = {BACKGROUND_VAR: "1"}
    return {**_failure_sweeps(tmp_path_factory, env), "killed": _killed_runs(tmp_path_factory, env)}


def _all_runs(tmp_path_factory) -> dict:
    return {**_failure_sweeps(tmp_path_factory), "killed": _killed_runs(tmp_path_factory)}


@pytest.fixture(scope="module")
def failure_sweeps(tmp_path_factory):
    return prefetched(__name__, _all_runs, tmp_path_factory)


@pytest.fixture(scope="module")
def crash_sweep(failure_sweeps):
    return failure_sweeps["crash"]


def test_crashing_rank_fails_its_run_and_the_sweep_goes_on(crash_sweep):
    results, r = crash_sweep
    assert r.returncode == 0, r.stderr  # one of two runs failed: the sweep itself succeeded
    assert "Traceback" not in r.stdout
    rows = {row["settings"]["crash_rank"]: row for row in records(results)}
    bad, good = rows[1], rows[None]
    assert bad["status"] == "failed"
    # the reason names the rank, how it died and the last step it finished (crash_step 2: steps 0, 1 done)
    assert "rank 1 exited with code 3 after step 1" in bad["error"], bad["error"]
    assert good["status"] == "ok" and good["throughput"] > 0
    rec = Store(results).get_run(bad["run_id"])
    assert rec["failed_rank"] == 1
    assert "[perfbench] inject" in rec["log_tail"]  # the tail of rank 1's own log
    # the steps rank 0 and 1 finished before the crash are kept
    steps = Store(results).read_table(bad["run_id"], "workload_steps")
    assert steps is not None and set(steps.loc[steps["rank"] == 1, "step"]) == {0, 1}
    assert leftovers(results) == []
    shown = run_perfbench("show", bad["run_id"], "--results", results).stdout
    assert "failed" in shown and "[perfbench] inject" in shown


def test_hanging_rank_is_killed_after_the_stall_timeout(failure_sweeps):
    results, r = failure_sweeps["hang"]
    assert r.returncode == 0, r.stderr
    rows = {row["settings"]["hang_rank"]: row for row in records(results)}
    bad, good = rows[1], rows[None]
    assert bad["status"] == "failed" and "hung" in bad["error"] and "stall_timeout_s" in bad["error"]
    assert Store(results).get_run(bad["run_id"])["failed_rank"] == 1
    assert good["status"] == "ok"
    assert leftovers(results) == []
    # the hang was cut by the stall timeout, not the whole-run timeout (400 s): the hung run's own wall time, not the
    # sweep's, which holds two runs whose start-up alone can take minutes on a loaded machine
    assert Store(results).get_run(bad["run_id"])["launch"]["wall_s"] < 400


def _killed_sweep(tmp_path, env: dict | None = None) -> dict:
    """A 2-run sweep SIGKILLed once its first run is committed and its second has finished a step, then resumed."""
    import signal
    import subprocess
    import sys

    from tests.support import ROOT

    cfg = write_yaml(tmp_path / "resume.yaml", dict(SMALL, name="resume", sweep={"world_size": [1, 2]}))
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(results)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    store = Store(results)
    deadline = time.time() + 500
    try:
        while time.time() < deadline:  # wait until run 1 is committed and run 2 has finished a step
            recs = {r["settings"]["world_size"]: r for r in store.list_runs()}
            if recs.get(1, {}).get("status") == "ok" and 2 in recs:
                m = store.run_dir(recs[2]["run_id"]) / "artifacts" / "metrics" / "rank0.steps.jsonl"
                if m.exists() and m.stat().st_size > 0:
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("sweep did not reach the second run in time")
        proc.send_signal(signal.SIGKILL)  # the harshest stop: no cleanup code runs at all
        proc.wait(timeout=30)
        killed = time.time()
        # nothing left behind: msrun, its scheduler and both workers die within 10 s of the sweep
        while leftovers(results) and time.time() - killed < 10:
            time.sleep(0.2)
        left_after_kill = leftovers(results)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = {r["settings"]["world_size"]: r for r in store.list_runs()}
    r = run_perfbench("sweep", cfg, "--results", results, "--resume", timeout=600, env=env)
    after = {r["settings"]["world_size"]: r for r in store.list_runs()}
    return {
        "left_after_kill": left_after_kill,
        "first": first,
        "resumed": r,
        "after": after,
        "left": leftovers(results),
        "sweeps": store.list_sweeps(),
    }


def _killed_rank(tmp_path, env: dict | None = None) -> dict:
    """A 1-run 2-rank sweep whose rank 1 is SIGKILLed (by its pid in its meta) once it has finished 3 steps."""
    import signal
    import subprocess
    import sys

    from tests.support import ROOT

    cfg = write_yaml(
        tmp_path / "kill.yaml",
        dict(SMALL, name="kill", train=dict(SMALL["train"], steps=200), sweep={"world_size": [2]}),
    )
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(results)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = Store(results)
    victim, done = None, 0
    try:
        deadline = time.time() + 400
        while time.time() < deadline and victim is None:
            assert proc.poll() is None, proc.communicate()
            for rec in store.list_runs():
                metrics = store.run_dir(rec["run_id"]) / "artifacts" / "metrics"
                meta, steps = metrics / "rank1.meta.json", metrics / "rank1.steps.jsonl"
                if meta.exists() and steps.exists() and steps.read_bytes().count(b"\n") >= 3:
                    victim = json.loads(meta.read_text())["pid"]
                    os.kill(victim, signal.SIGKILL)
                    done = steps.read_bytes().count(b"\n")
                    break
            time.sleep(0.2)
        assert victim is not None, "rank 1 never finished 3 steps"
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return {
        "returncode": proc.returncode,
        "err": err,
        "runs": store.list_runs(),
        "done": done,
        "left": leftovers(results),
    }


def _killed_runs(tmp_path_factory, env: dict | None = None) -> dict:
    """The killed-sweep and killed-rank scenarios, two at a time: they check statuses, records, steps and processes,
    not times. Each test takes its scenario's outcome (`.result()` raises what went wrong in it there)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return {
            "sweep": pool.submit(_killed_sweep, tmp_path_factory.mktemp("killed_sweep"), env),
            "rank": pool.submit(_killed_rank, tmp_path_factory.mktemp("killed_rank"), env),
        }


@pytest.fixture(scope="module")
def killed_runs(failure_sweeps):
    return failure_sweeps["killed"]


def test_killed_sweep_keeps_finished_runs_and_resume_reruns_only_the_rest(killed_runs):
    got = killed_runs["sweep"].result()
    assert got["left_after_kill"] == [], "processes outlived the SIGKILLed sweep by 10 s"
    first, after = got["first"], got["after"]
    assert first[1]["status"] == "ok" and first[2]["status"] == "running"
    assert "already ok, skipped" in got["resumed"].stderr
    assert after[1] == first[1]  # untouched, byte for byte the same record
    assert after[2]["status"] == "ok" and after[2]["run_id"] == first[2]["run_id"]
    assert got["left"] == []
    assert len(got["sweeps"]) == 1


def test_rank_killed_with_sigkill_is_named_with_its_signal_and_last_step(killed_runs):
    """`kill -9` of one rank mid-run: the run fails with "rank 1 killed by SIGKILL after step K"."""
    import re

    got = killed_runs["rank"].result()
    assert got["returncode"] == 1 and "Traceback" not in got["err"], got["err"]  # its only run failed
    (rec,) = got["runs"]
    assert rec["status"] == "failed" and rec["failed_rank"] == 1
    m = re.match(r"rank 1 killed by SIGKILL after step (\d+) ", rec["error"])
    assert m, rec["error"]
    assert got["done"] - 1 <= int(m.group(1)) <= got["done"]  # the step it had finished (one more may have landed)
    assert got["left"] == []


def test_a_crash_in_the_teardown_after_every_rank_wrote_everything_keeps_the_run(crash_sweep):
    # rank 1 kills itself with SIGSEGV after its final meta (inject.crash_at_exit_rank): what MindSpore's own
    # teardown did once in CI to a finished pipeline rank. Nothing is lost, so the run is ok and says what happened;
    # the same signal one step earlier (test_rank_killed_with_sigkill_...) fails the run.
    results, r = crash_sweep
    assert r.returncode == 0, r.stderr
    rows = {row["settings"]["crash_rank"]: row for row in records(results)}
    row = rows[None]  # the run without crash_rank: only the crash at exit
    assert row["status"] == "ok" and row["throughput"] > 0
    rec = Store(results).get_run(row["run_id"])
    assert "rank 1 killed by SIGSEGV in MindSpore's teardown" in rec["launch"]["teardown_error"], rec["launch"]
    steps = Store(results).read_table(row["run_id"], "workload_steps")
    assert sorted(steps.groupby("rank")["step"].count()) == [6, 6]
    assert leftovers(results) == []
