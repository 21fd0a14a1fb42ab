"""Shared test fixtures. Real Ascend profiler outputs are read from ../shared/fixtures (never copied).

Process hygiene (docs/testing.md): every process the suite starts carries the environment variable
PERFBENCH_TEST_SESSION (set here, inherited by every child, also by msrun's workers that leave the process
tree). So the suite can find exactly its own processes on a machine shared with other runs:

* a test that is not marked `msrun` fails if it starts msrun (a watcher polls the session's processes);
* a process started by a test's body that is still alive after its teardown fails that test (and is killed);
  runs started in the background for later tests are declared with `background_launch(name)`;
* at the end of the session every process of the session is gone, or the run fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared/fixtures beside the checkout (also found from a copy of the tree one level down, e.g. mutmut's mutants/)
FIXTURES = next((p / "shared" / "fixtures" / "ascend" for p in (ROOT.parent, ROOT.parent.parent)
                 if (p / "shared" / "fixtures" / "ascend").is_dir()), ROOT.parent / "shared" / "fixtures" / "ascend").resolve()


def fixture_path(*parts: str) -> Path:
    """Path to a real fixture under ../shared/fixtures/ascend; fails loudly if it is missing."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"fixture {p} is missing (is ../shared/fixtures beside the checkout?)")
    return p


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


# ---- msprof-analyze itself, run once per data set and mode per session (and kept: tests/msprof_cache.py) -------

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
                r = run_msprof(fixture_path(*parts), ["cluster", "-d", "{data}", "-m", mode, "--export_type", export],
                               work)
            except FileNotFoundError as exc:
                pytest.fail(str(exc))
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            out = r.data / "cluster_analysis_output"
            assert out.is_dir(), r.stdout[-2000:]
            done[key] = (r.data, out)
        return done[key]

    return run


# ---- one real tiny sweep per test session, shared by the end-to-end, compare/check and UI tests ----

TINY_SWEEP = {
    "name": "tiny",
    "workload": "resnet50",
    # the real ResNet-50 layout (bottleneck blocks 3-4-6-3), narrow and on small images so CPU steps are short
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [3, 4, 6, 3]},
    "train": {"batch_size": 4, "steps": 9, "warmup_steps": 2, "seed": 0},
    "profile": {"enabled": True, "steps": 3},
    "launch": {"timeout_s": 600, "stall_timeout_s": 240},
    "sweep": {"world_size": [1, 2]},
    "repeats": 2,
}


def free_port(lo: int | None = None, hi: int | None = None) -> int:
    """A free TCP port on 127.0.0.1, chosen by the OS at run time (or the first free one in [lo, hi)).
    msrun launches take `master_port: "auto"`, which the launcher resolves the same way."""
    import socket

    if lo is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port in {lo}-{hi - 1}")


def run_perfbench(*args: str, timeout: float = 900, check: bool = True, cwd=None):
    """Run the real `perfbench` CLI in a subprocess (as a user would) and return the CompletedProcess."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "perfbench", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd=cwd or ROOT)
    if check and r.returncode != 0:
        raise AssertionError(f"perfbench {' '.join(map(str, args))} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return r


def perfbench_in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """The real `perfbench` command line run in this process (perfbench.cli.main), returned like `run_perfbench`'s
    CompletedProcess: the same code without ~1 s of CPU for a new interpreter and its imports per call. An
    unhandled exception (what a user would see as a traceback) propagates and fails the test. Keep
    `run_perfbench` where the process itself is under test (`python -m perfbench`, exit status, stderr)."""
    import contextlib
    import io

    from perfbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    r = subprocess.CompletedProcess(["perfbench", *map(str, args)], code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"perfbench {' '.join(map(str, args))} exited {code}\nstdout:\n{r.stdout[-3000:]}\n"
                             f"stderr:\n{r.stderr[-3000:]}")
    return r


def write_yaml(path: Path, obj: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def sweep_store(tmp_path_factory):
    """Results dir of one real sweep: ResNet-50 (narrow) on world sizes 1 and 2, 2 repeats each, via msrun."""
    base = tmp_path_factory.mktemp("sweep_store")
    cfg = write_yaml(base / "tiny.yaml", TINY_SWEEP)
    results = base / "results"
    run_perfbench("sweep", cfg, "--results", results, timeout=1500)
    return results


# ---- process hygiene --------------------------------------------------------------------------------

SESSION_VAR = "PERFBENCH_TEST_SESSION"
from perfbench.launcher import TAG_VAR  # noqa: E402  every process of one msrun launch carries it
os.environ[SESSION_VAR] = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # fresh per session: only our descendants
_BACKGROUND: set[str] = set()  # run ids whose msrun launch may outlive the test that queued it


def background_launch(run_id: str) -> None:
    """Declare that the msrun launch of `run_id` runs in the background for later tests (prefetch)."""
    _BACKGROUND.add(run_id)


def session_processes(exclude: set | frozenset = frozenset()) -> list[psutil.Process]:
    """Live processes started by this test session (found by SESSION_VAR, wherever they were reparented),
    except those in `exclude` ((pid, create_time) pairs of an earlier snapshot)."""
    me, mark, out = os.getpid(), os.environ[SESSION_VAR], []
    for p in psutil.process_iter(["create_time"]):
        try:
            if p.pid == me or (p.pid, p.info["create_time"]) in exclude:
                continue
            if p.environ().get(SESSION_VAR) == mark and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def _snapshot() -> set:
    out = set()
    for p in session_processes():
        try:
            out.add((p.pid, p.create_time()))
        except psutil.NoSuchProcess:
            pass
    return out


def _env(p: psutil.Process, var: str) -> str | None:
    try:
        return p.environ().get(var)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def _is_msrun(p: psutil.Process) -> bool:
    try:
        return _env(p, TAG_VAR) is not None or any("msrun" in os.path.basename(a) for a in p.cmdline()[:2])
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False


def _describe(procs) -> str:
    out = []
    for p in procs:
        try:
            out.append(f"pid {p.pid}: {' '.join(p.cmdline())[:160]}")
        except psutil.Error:
            out.append(f"pid {p.pid}")
    return "; ".join(out)


def kill_processes(procs, grace_s: float = 3.0) -> None:
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


def _background(p: psutil.Process) -> bool:
    tag = _env(p, TAG_VAR)
    return bool(tag) and any(tag.startswith(f"{rid}-") for rid in _BACKGROUND)


class _MsrunWatcher(threading.Thread):
    """Polls the session's processes while a fast-lane test runs; remembers any msrun it sees."""

    def __init__(self, before: set):
        super().__init__(daemon=True)
        self.before, self.seen, self._stop_ev = before, {}, threading.Event()

    def run(self):
        while not self._stop_ev.wait(0.25):
            self.scan()

    def scan(self):
        for p in session_processes(self.before):
            if p.pid not in self.seen and _is_msrun(p):
                self.seen[p.pid] = _describe([p])

    def stop(self):
        self._stop_ev.set()
        self.join(5)
        self.scan()


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
        problems.append(f"{item.nodeid} started msrun but is not marked @pytest.mark.msrun "
                        f"(the fast lane `-m 'not msrun'` must start none): {'; '.join(seen.values())}")
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


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A full run leaves no process behind: anything of this session still alive now is killed and fails the run."""
    left = session_processes()
    if left:
        _, left = psutil.wait_procs(left, timeout=10)
    if left:
        what = _describe(left)
        kill_processes(left)
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"ERROR: the test session left {len(left)} process(es) running (killed): {what}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config, items):
    """Honest markers: a test that uses the session's real sweep launches msrun, so it must say so."""
    bad = [it.nodeid for it in items
           if "sweep_store" in getattr(it, "fixturenames", ()) and not any(it.iter_markers("msrun"))]
    if bad:
        raise pytest.UsageError("tests that use the `sweep_store` fixture (a real msrun sweep) must be marked "
                                "@pytest.mark.msrun: " + ", ".join(bad))


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
    remaining = [p for p in psutil.process_iter(["pid", "status"])
                 if _pgid(p.pid) in groups and p.info["status"] != psutil.STATUS_ZOMBIE]
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
    run_perfbench("analyze", fixture_path("Ascend__msinsight", "test", "data", "pytorch", "text", "level1"),
                  "--results", results, timeout=300)
    return results
