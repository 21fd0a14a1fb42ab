"""Shared test fixtures. Real Ascend profiler outputs are read from ../shared/fixtures (never copied).

Process hygiene (docs/testing.md): every process the suite starts carries the environment variable
PERFBENCH_TEST_SESSION (set here, inherited by every child, also by msrun's workers that leave the process
tree). So the suite can find exactly its own processes on a machine shared with other runs:

* a test that is not marked `msrun` fails if it starts msrun (a watcher polls the session's processes);
* a process started by a test's body that is still alive after its teardown fails that test (and is killed);
  runs started in the background for later tests are declared with `background_launch(name)`, and the processes of
  runs prefetched for a later module (`prefetch_runs`, below) carry PERFBENCH_TEST_BACKGROUND or run inside
  `background_launches(names)`;
* at the end of the session every process of the session is gone, or the run fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.support import (
    fixture_path,
    run_perfbench,
    write_yaml,
    session_processes,
    _snapshot,
    _describe,
    kill_processes,
    _background,
    _MsrunWatcher,
    BACKGROUND_VAR,
    TINY_SWEEP,
    prefetch,
    prefetched,
    wait_for_prefetches,
)


@pytest.fixture
def fixture_copy(tmp_path):
    """Copy a fixture file or folder into tmp_path (for SQLite WAL files and corrupt variants)."""

    def _copy(*parts: str) -> Path:
        src = fixture_path(*parts)
        dst = tmp_path / src.name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
        return dst

    return _copy


@pytest.fixture(scope="session")
def msprof_cluster(tmp_path_factory):
    """`msprof_cluster(*fixture_parts, mode="all", export="db")` runs the real `msprof-analyze cluster -d COPY -m
    mode --export_type export` (db is its default) on a temp copy of a fixture and returns (COPY,
    COPY/cluster_analysis_output). Each (fixture, mode, export) runs once per session, and its output is kept
    between sessions keyed by the tool's version and the fixture's bytes (tests/msprof_cache.py;
    PERFBENCH_MSPROF_FRESH=1 runs it again). Treat both folders as read-only."""
    from tests.msprof_cache import run_msprof

    done: dict[tuple, tuple[Path, Path]] = {}

    def run(*parts: str, mode: str = "all", export: str = "db") -> tuple[Path, Path]:
        key = (parts, mode, export)
        if key not in done:
            work = tmp_path_factory.mktemp(f"msprof-{mode}") / "run"
            try:
                r = run_msprof(
                    fixture_path(*parts), ["cluster", "-d", "{data}", "-m", mode, "--export_type", export], work
                )
            except FileNotFoundError as exc:
                pytest.fail(str(exc))
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            out = r.data / "cluster_analysis_output"
            assert out.is_dir(), r.stdout[-2000:]
            done[key] = (r.data, out)
        return done[key]

    return run


def _tiny_sweep(tmp_path_factory, env: dict | None = None):
    base = tmp_path_factory.mktemp("sweep_store")
    cfg = write_yaml(base / "tiny.yaml", TINY_SWEEP)
    results = base / "results"
    run_perfbench("sweep", cfg, "--results", results, timeout=1500, env=env)
    return results


@pytest.fixture(scope="session")
def sweep_store(tmp_path_factory):
    """Results dir of one real sweep: ResNet-50 (narrow) on world sizes 1 and 2, 2 repeats each, via msrun; started
    in the background at the session's start when a collected test uses it (pytest_collection_finish)."""
    return prefetched("sweep_store", _tiny_sweep, tmp_path_factory)


#: `make mutation` runs only fast in-process tests, once per mutant: the process checks would dominate its time
_HYGIENE = not os.environ.get("PERFBENCH_MUTATION")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """The test body: processes it starts must be gone after its teardown; fast-lane tests start no msrun."""
    if not _HYGIENE:
        yield
        return
    item._pb_before = before = _snapshot()
    watcher = None
    if not any(item.iter_markers("msrun")):
        watcher = _MsrunWatcher(before)
        watcher.start()
    try:
        yield
    finally:
        if watcher is not None:
            watcher.stop()
            item._pb_msrun_seen = watcher.seen


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    problems = []
    seen = getattr(item, "_pb_msrun_seen", None)
    if seen:
        problems.append(
            f"{item.nodeid} started msrun but is not marked @pytest.mark.msrun "
            f"(the fast lane `-m 'not msrun'` must start none): {'; '.join(seen.values())}"
        )
    before = getattr(item, "_pb_before", None)
    if before is not None:
        left = [p for p in session_processes(before) if not _background(p)]
        if left:
            _, left = psutil.wait_procs(left, timeout=5)  # a process that is on its way out
        if left:
            what = _describe(left)
            kill_processes(left)
            problems.append(f"{item.nodeid} left {len(left)} process(es) running after its teardown (killed): {what}")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def pytest_collection_finish(session):
    """Prefetched runs: a module with an msrun test in the session that defines `prefetch_runs(tmp_path_factory)` has
    it started now, in the background (tests.support.prefetch), for its fixture to read later; it runs beside the fast
    tests collected before the first msrun test, which waits for it (pytest_runtest_setup). The fast lane
    (`-m "not msrun"`) starts none, though it runs fast tests of such modules."""
    if session.config.option.collectonly:
        return
    if any("sweep_store" in getattr(it, "fixturenames", ()) for it in session.items):
        # its runs' times are read by test_check.py as a baseline, beside later runs: a baseline slowed by the fast
        # tests beside it can only make those runs look faster (allowed there) and the injected slowdown larger
        prefetch("sweep_store", _tiny_sweep, session.config._tmp_path_factory, {BACKGROUND_VAR: "1"})
    seen = set()
    for item in session.items:
        mod = getattr(item, "module", None)
        if not any(item.iter_markers("msrun")):
            continue
        if mod is not None and hasattr(mod, "prefetch_runs") and mod.__name__ not in seen:
            seen.add(mod.__name__)
            prefetch(mod.__name__, mod.prefetch_runs, session.config._tmp_path_factory)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """No msrun test starts while prefetched runs are still going: the runs of some measure times."""
    if any(item.iter_markers("msrun")):
        wait_for_prefetches()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A full run leaves no process behind: anything of this session still alive now is killed and fails the run.
    Prefetched runs that no test waited for (a run stopped early) are ended first."""
    while not wait_for_prefetches(timeout=0.5):  # a killed sweep returns, and its thread may start the next one
        kill_processes([p for p in session_processes() if _background(p)])
    left = session_processes()
    if left:
        _, left = psutil.wait_procs(left, timeout=10)
    if left:
        what = _describe(left)
        kill_processes(left)
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"ERROR: the test session left {len(left)} process(es) running (killed): {what}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: a file with a test of these markers runs after every file without one
_SLOW_MARKERS = ("msrun", "browser", "slurm")


def _fast_files_first(items) -> None:
    """Files whose tests launch no msrun, drive no browser and need no Slurm run first (pytest's order kept otherwise,
    a file's tests kept together): the runs prefetched at the session's start (pytest_collection_finish) overlap all
    of them (tests/golden, tests/unit and the fast files of tests/ui), not only those that sort before
    tests/integration."""
    slow = {it.path for it in items if any(next(it.iter_markers(m), None) for m in _SLOW_MARKERS)}
    items.sort(key=lambda it: it.path in slow)


def pytest_collection_modifyitems(config, items):
    """Honest markers: a test that uses the session's real sweep launches msrun, so it must say so. Then the fast
    files first (_fast_files_first)."""
    bad = [
        it.nodeid
        for it in items
        if "sweep_store" in getattr(it, "fixturenames", ()) and not any(it.iter_markers("msrun"))
    ]
    if bad:
        raise pytest.UsageError(
            "tests that use the `sweep_store` fixture (a real msrun sweep) must be marked "
            "@pytest.mark.msrun: " + ", ".join(bad)
        )
    _fast_files_first(items)


@pytest.fixture
def spawn():
    """Start processes in their own process group; at teardown kill each group and assert none remain."""
    started: list[subprocess.Popen] = []

    def _spawn(cmd, **kw):
        proc = subprocess.Popen(cmd, start_new_session=True, **kw)
        started.append(proc)
        return proc

    yield _spawn
    groups = [p.pid for p in started]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
        for p in started:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
    remaining = [
        p
        for p in psutil.process_iter(["pid", "status"])
        if _pgid(p.pid) in groups and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert not remaining, f"processes left in the test's process groups: {_describe(remaining)}"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


@pytest.fixture(scope="session")
def imported_store(tmp_path_factory):
    """Results dir holding one `perfbench analyze` import of a real 2-rank Ascend profile (set B, level1):
    advice, collectives, slow-rank tests, per-rank breakdown; fast, no msrun."""
    results = tmp_path_factory.mktemp("imported") / "results"
    run_perfbench(
        "analyze",
        fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1"),
        "--results",
        results,
        timeout=300,
    )
    return results
