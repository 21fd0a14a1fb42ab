"""`perfbench tune` with real msrun trials (tiny model, 1 rank): a slow trial is pruned on its live step
records and stopped within seconds, a crashing trial does not stop the search, and a killed search
resumes without re-running finished trials."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from analyzers.analyses.steadiness import unsteady_reasons
from perfbench.run.launcher import TAG_VAR
from perfbench.store import Store
from tests.support import ROOT

pytestmark = pytest.mark.msrun

BASE = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 9, "warmup_steps": 1, "seed": 0},
    "profile": {"enabled": False, "steps": 2},
    "launch": {"timeout_s": 600, "stall_timeout_s": 240},
}


def write(tmp_path, name: str, **extra) -> str:
    cfg = dict(BASE, name=name, **extra)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def tune(config: str, results, *more, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfbench", "tune", config, "--results", str(results), "--json", *more],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
    )


def our_processes(prefix: str, settle_s: float = 20.0) -> list[psutil.Process]:
    """Processes tagged by this search's runs still alive after `settle_s` (a SIGKILLed MindSpore rank can
    take a few seconds to exit on a loaded machine; a leaked one stays)."""
    end = time.time() + settle_s
    while True:
        found = _tagged(prefix)
        if not found or time.time() > end:
            return found
        time.sleep(1.0)


def _tagged(prefix: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(TAG_VAR, "").startswith(prefix):
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


@pytest.fixture(scope="module")
def pruned_search(tmp_path_factory):
    """One real search shared by the pruning test and the Tuning page test: (results folder, --json answer)."""
    tmp_path = tmp_path_factory.mktemp("tune_prune")
    # grid over 4 points, 3 trials; trial 0 is the default (no delay, no crash), then the grid sampler's fixed order
    # (seed 0): a trial whose rank exits at step 2 (one measured step: too early for the pruner) fails; the search
    # goes on, and a trial that sleeps 1.5 s per step is far slower than the default from its first measured steps:
    # successive halving (reduction factor 3, min_steps 2) promotes only the best value at a rung of fewer than 3
    # trials, so it must be pruned. The fourth point (crash, no delay) would be a second crashing launch (~22 s).
    cfg = write(
        tmp_path,
        "prune",
        sweep={"delay_ms": [0, 1500], "crash_rank": [None, 0]},
        inject={"crash_step": 2},
        search={
            "strategy": "grid",
            "pruner": "successive_halving",
            "min_steps": 2,
            "budget": {"trials": 3},
            "profile_best": False,
            "confirm": {"top": 0},
        },
    )
    res = tune(cfg, tmp_path / "r")
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp_path / "r", json.loads(res.stdout)


def test_slow_trial_is_pruned_and_a_crashing_trial_does_not_stop_the_search(pruned_search):
    results, ans = pruned_search
    assert set(ans) >= {"study", "objective", "best", "trials", "importance", "wall_s"}
    assert ans["objective"] == "throughput"
    trials = {(t["settings"]["delay_ms"], t["settings"]["crash_rank"]): t for t in ans["trials"]}
    assert len(ans["trials"]) == 3 and len(trials) == 3  # three points, none twice
    assert trials[(0, None)]["status"] == "ok" and trials[(0, None)]["number"] == 0
    # the crashing trial came before the slow one: the search went on after it
    assert trials[(1500, 0)]["number"] < trials[(1500, None)]["number"]
    assert ans["best"]["settings"]["delay_ms"] == 0 and ans["best"]["settings"]["crash_rank"] is None
    assert ans["best"]["run_id"] == trials[(0, None)]["run_id"]
    assert ans["gain"] == 0.0  # the default is the best

    slow = trials[(1500, None)]
    assert slow["status"] == "pruned" and slow["value"] is None
    assert 3 <= slow["steps"] < 9  # warm-up + the 2 measured steps the pruner needed, not the whole run
    assert trials[(1500, 0)]["status"] == "failed"

    store = Store(results)
    rec = store.read_run(slow["run_id"])
    assert rec["status"] == "pruned" and rec["source"] == "tune"
    assert "pruned" in rec["error"]
    assert rec["tune"]["stopped_s"] < 10  # decision to stored record: kill (SIGTERM, 3 s grace) + ingest
    steps = store.read_table(slow["run_id"], "workload_steps")
    assert steps is not None and steps["step"].max() + 1 == slow["steps"]  # its steps are kept
    assert our_processes(ans["study"]) == []  # no rank of any trial left behind
    crashed = store.read_run(trials[(1500, 0)]["run_id"])
    assert crashed["status"] == "failed" and "rank 0" in crashed["error"]

    ls = subprocess.run(
        [sys.executable, "-m", "perfbench", "ls", "--results", str(results), "--json", "--status", "pruned"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert ls.returncode == 0, ls.stderr
    assert sorted(r["run_id"] for r in json.loads(ls.stdout)) == sorted(
        t["run_id"] for t in ans["trials"] if t["status"] == "pruned"
    )


def _killed_tune_resumes(tmp_path) -> None:
    """A grid search SIGKILLed while its second trial trains, then resumed (asserts as it goes)."""
    cfg = write(
        tmp_path,
        "resume",
        sweep={"batch_size": [2, 4, 8]},
        search={
            "strategy": "grid",
            "pruner": "none",
            "budget": {"trials": 3},
            "profile_best": False,
            "confirm": {"top": 0},
        },
    )
    results = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "tune", cfg, "--results", str(results), "--json"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    store = Store(results)
    first = None
    deadline = time.time() + 600
    try:
        while time.time() < deadline and proc.poll() is None:
            done = [r for r in store.list_runs() if r["status"] == "ok"]
            running = [r for r in store.list_runs() if r["status"] == "running"]
            if done and running:  # one trial finished, the next one is training: kill the search now
                first = done[0]
                break
            time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the search and nothing else (ranks run in their own sessions)
        proc.wait(timeout=30)
    assert first is not None, "no trial finished before the deadline"
    res = tune(cfg, results, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    ans = json.loads(res.stdout)
    again = store.read_run(first["run_id"])
    assert again["timings"]["started"] == first["timings"]["started"]  # not run again
    ok = [t for t in ans["trials"] if t["status"] == "ok"]
    assert sorted(t["settings"]["batch_size"] for t in ok) == [2, 4, 8]  # every point measured once
    interrupted = [t for t in ans["trials"] if t["status"] == "failed"]
    assert len(interrupted) == 1 and "interrupted" in store.read_run(interrupted[0]["run_id"])["error"]
    assert our_processes(ans["study"]) == []


def _best_is_confirmed(tmp_path) -> None:
    """A 2-point search whose best two are re-measured (asserts as it goes)."""
    # 2 points; a 400 ms sleep in every step makes delay 400 far slower than delay 0 (a ~0.05 s step), whatever
    # the load. Both are re-measured once more (top 2, rounds 1, a band wide enough for both), the last round with
    # the profiler at level light for the leader only; the best's value is its re-measurement, and that run is the
    # profiled one that explains it.
    cfg = write(
        tmp_path,
        "confirm",
        sweep={"delay_ms": [0, 400]},
        train={"batch_size": 4, "steps": 6, "warmup_steps": 1, "seed": 0},
        profile={"enabled": True, "steps": 2, "level": "light"},
        search={
            "strategy": "grid",
            "pruner": "none",
            "budget": {"trials": 2},
            "confirm": {"top": 2, "rounds": 1, "band": 1.0},
        },
    )
    res = tune(cfg, tmp_path / "r")
    assert res.returncode == 0, res.stderr[-3000:]
    ans = json.loads(res.stdout)
    conf = ans["confirmation"]
    assert [c["settings"]["delay_ms"] for c in conf["candidates"]] == [0, 400]  # best trial first
    store = Store(tmp_path / "r")
    starts = []
    for c in conf["candidates"]:
        assert len(c["runs"]) == 1
        run = store.read_run(c["runs"][0])
        assert run["status"] == "ok" and run["tune"]["confirm_of"] == c["number"] and run["tune"]["round"] == 1
        # a re-measurement votes with its throughput, or (on a loaded machine, unsteady by its own CPU time) is
        # listed under `unsteady` with the steadiness check's reasons and does not vote: one or the other, never lost
        why = unsteady_reasons(run["metrics"], wall=False)
        if why:
            assert c["values"] == [] and c["unsteady"] == {c["runs"][0]: why}
        else:
            assert c["values"] == [pytest.approx(run["metrics"]["throughput"])] and "unsteady" not in c
        starts.append(run["timings"]["started"])
    assert starts == sorted(starts)  # measured one after the other, best candidate first
    fast = conf["candidates"][0]
    trial = next(t for t in ans["trials"] if t["number"] == fast["number"])
    # the last round ran the leader with the profiler, the other candidate without it
    assert int(store.read_table(fast["runs"][0], "workload_steps")["profiled"].sum()) == 2
    slow = store.read_table(conf["candidates"][1]["runs"][0], "workload_steps")
    assert len(slow) and int(slow["profiled"].sum()) == 0
    # the pick: the median of the trial's own value and its fresh run (with one round: their mean), not the trial
    # alone; on a loaded machine whose fresh run was unsteady, the trial's own value alone, flagged unconfirmed
    assert conf["pick"] == fast["number"] and ans["best"]["settings"]["delay_ms"] == 0
    assert ans["best"]["value"] == pytest.approx((trial["value"] + sum(fast["values"])) / (1 + len(fast["values"])))
    assert fast.get("unconfirmed", False) is (not fast["values"])
    assert ans["finalist"] == fast["runs"][0]  # its profiled confirmation run explains it
    assert ans["finalist"] in store.read_sweep(ans["study"])["runs"]
    assert our_processes(ans["study"]) == []


@pytest.fixture(scope="module")
def resume_and_confirm(tmp_path_factory):
    """The killed-and-resumed search and the confirmed search, two at a time. The first checks which trials ran,
    not times; in the second the best is chosen by a 400 ms sleep per step, which sharing the cores does not
    change, and an unsteady re-measurement is an outcome it checks. `.result()` raises a scenario's failure in
    its own test."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return {
            "resume": pool.submit(_killed_tune_resumes, tmp_path_factory.mktemp("tune_resume")),
            "confirm": pool.submit(_best_is_confirmed, tmp_path_factory.mktemp("tune_confirm")),
        }


def test_killed_tune_resumes_without_rerunning_finished_trials(resume_and_confirm):
    resume_and_confirm["resume"].result()


def test_the_best_is_confirmed_by_fresh_runs_and_its_last_round_is_profiled(resume_and_confirm):
    resume_and_confirm["confirm"].result()


@pytest.mark.browser
def test_tuning_page_shows_the_search(pruned_search):
    from tests.ui.test_dashboard_ui import CHROMIUM, CHROMIUM_ARGS, Page, _free_port

    results, ans = pruned_search
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfbench", "dashboard", "--results", str(results), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            p = Page(browser)
            end = time.time() + 120
            while True:
                try:
                    page = p.open(f"http://127.0.0.1:{port}/tuning?study={ans['study']}", "#tuning-trials td")
                    break
                except Exception:
                    if time.time() > end or proc.poll() is not None:
                        raise
                    time.sleep(1)
                    p = Page(browser)
            page.wait_for_timeout(500)
            assert p.errors == [], p.errors
            rows = page.locator("#tuning-trials tbody tr:has(td)").count()
            assert rows == len(ans["trials"]) == 3
            text = page.locator("#tuning-trials").inner_text()
            assert "pruned" in text and "failed" in text
            best = page.locator("#tuning-best").inner_text()
            assert "delay_ms=0" in best and "crash_rank=None" in best
            # the history chart has one marker per trial (ok, pruned and failed traces) and a best-so-far line
            n = page.evaluate("""() => {
                const g = document.querySelector('#tuning-history .js-plotly-plot');
                return g.data.filter(t => t.mode === 'markers').reduce((a, t) => a + t.x.length, 0);
            }""")
            assert n == 3
            browser.close()
    finally:
        proc.kill()  # the dashboard server this test started (read-only: nothing to flush)
        proc.wait(15)
