"""Helpers the tests share: where the repo and the shared fixtures are, running the CLI (in a subprocess or in
process), writing configs, free ports, and finding the processes a test session started. Test modules import
them from here; tests/conftest.py keeps the fixtures and hooks."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

import psutil

from perfbench.run.processes import terminate


ROOT = Path(__file__).resolve().parents[2]


# ../shared/fixtures beside the checkout (also found from a copy of the tree one level down, e.g. mutmut's mutants/)
FIXTURES = next(
    (
        p / "shared" / "fixtures" / "ascend"
        for p in (ROOT.parent, ROOT.parent.parent)
        if (p / "shared" / "fixtures" / "ascend").is_dir()
    ),
    ROOT.parent / "shared" / "fixtures" / "ascend",
).resolve()


def kineto_path(*parts: str) -> Path:
    """Path to a real PyTorch profiler trace set under ../shared/fixtures/kineto/ (its README: sets P-T)."""
    p = FIXTURES.parent.joinpath("kineto", "facebookresearch__HolisticTraceAnalysis", "tests", "data", *parts)
    if not p.exists():
        raise FileNotFoundError(f"fixture {p} is missing (is ../shared/fixtures beside the checkout?)")
    return p


def fixture_path(*parts: str) -> Path:
    """Path to a real fixture under ../shared/fixtures/ascend; fails loudly if it is missing."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"fixture {p} is missing (is ../shared/fixtures beside the checkout?)")
    return p


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


def run_perfbench(*args: str, timeout: float = 900, check: bool = True, cwd=None, env: dict | None = None):
    """Run the real `perfbench` CLI in a subprocess (as a user would) and return the CompletedProcess. `env`: variables
    added to this process's environment for it."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "perfbench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env={**os.environ, **env} if env else None,
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"perfbench {' '.join(map(str, args))} exited "
            f"{r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
        )
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
        raise AssertionError(
            f"perfbench {' '.join(map(str, args))} exited {code}\nstdout:\n{r.stdout[-3000:]}\n"
            f"stderr:\n{r.stderr[-3000:]}"
        )
    return r


def two_at_a_time(fn, items) -> list:
    """[fn(item) for item in items], two calls at a time (threads; an exception in one is raised here). For msrun
    launches or sweeps whose tests compare losses, counts, statuses or files, not times: a launch is mostly
    start-up latency (imports, the cluster join, the compile), so two overlap well on 2 cores; more would
    oversubscribe them until collectives time out (test_workload_resnet50.Runs)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(fn, items))


def torch_train_script() -> dict:
    """The `script:` section that sweeps the PyTorch reference job (workloads/torch_ddp/train.py), one thread per
    rank, as the torch integration tests run it."""
    return {
        "path": str(ROOT / "workloads" / "torch_ddp" / "train.py"),
        "framework": "pytorch",
        "env": {"OMP_NUM_THREADS": "1"},
    }


def write_yaml(path: Path, obj: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


SESSION_VAR = "PERFBENCH_TEST_SESSION"


from perfbench.run.launcher import TAG_VAR  # noqa: E402  every process of one msrun launch carries it


os.environ[SESSION_VAR] = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"  # fresh per session: only our descendants

# MindSpore's scheduler declares a rank dead after MS_NODE_TIMEOUT s without its heartbeat (default 30; the launcher
# makes ranks beat every second). When a rank crashes, msrun kills the other ranks at once but then waits that long
# for the scheduler before it exits, so every crashing run of the suite (~10 launches) idled ~30 s. The tests check
# what perfbench makes of the crash (status, rank, reason, log tail), not how long MindSpore waits to report it.
os.environ.setdefault("MS_NODE_TIMEOUT", "10")


_BACKGROUND: set[str] = set()  # run ids whose msrun launch may outlive the test that queued it
_BACKGROUND_PROCS: set[tuple[int, float]] = set()  # (pid, create time) of such launches' processes still ending
#: set on every process of work prefetched for later tests (`prefetch`): it runs beside the tests before them
BACKGROUND_VAR = "PERFBENCH_TEST_BACKGROUND"


def background_launch(run_id: str) -> None:
    """Declare that the msrun launch of `run_id` runs in the background for later tests (prefetch)."""
    _BACKGROUND.add(run_id)


@contextmanager
def background_launches(*run_ids: str):
    """`background_launch` for each of run_ids while the block runs (prefetched direct launches); they count as the
    tests' own again after it, so a later test's run of the same name is checked as any other."""
    _BACKGROUND.update(run_ids)
    try:
        yield
    finally:
        # a launch's processes can still be ending when the block returns (MindSpore's teardown): those stay
        # background by pid; a later run of the same name starts new processes, checked as any other
        for p in session_processes():
            tag = _env(p, TAG_VAR)
            if tag and any(tag.startswith(f"{rid}-") for rid in run_ids):
                try:
                    _BACKGROUND_PROCS.add((p.pid, p.create_time()))
                except psutil.Error:
                    pass
        _BACKGROUND.difference_update(run_ids)


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
    return (_environ(p) or {}).get(var)


def _is_msrun(p: psutil.Process, env: dict | None = None) -> bool:
    try:
        tag = ((_environ(p) if env is None else env) or {}).get(TAG_VAR)
        return tag is not None or any("msrun" in os.path.basename(a) for a in p.cmdline()[:2])
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
    """SIGTERM, then SIGKILL what is left after grace_s: the launcher's own way (perfbench.run.processes)."""
    terminate(list(procs), grace_s)


def _environ(p: psutil.Process) -> dict | None:
    """The process's environment; None when it is gone or ending (an ending process's environment reads empty)."""
    try:
        return p.environ() or None
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return None


def _background(p: psutil.Process, env: dict | None = None) -> bool:
    """Work that may outlive the test it runs beside (prefetched, or a declared background launch); a process gone
    or ending while it is looked at counts too: its environment, read once, cannot say whose it was."""
    env = _environ(p) if env is None else env
    if env is None or env.get(BACKGROUND_VAR):
        return True
    try:
        if (p.pid, p.create_time()) in _BACKGROUND_PROCS:
            return True
    except psutil.Error:
        return True
    tag = env.get(TAG_VAR)
    return bool(tag) and any(tag.startswith(f"{rid}-") for rid in _BACKGROUND)


_PREFETCHED: dict = {}  # name -> Future of work started by `prefetch`
_PREFETCH_POOL: list = []  # the one thread that runs prefetched work, one piece after another


def prefetch(name: str, fn, *args) -> None:
    """Queue fn(*args) on the prefetch thread (one piece of work at a time, in the order queued), for a module fixture
    that reads it later through `prefetched(name, ...)`. Only for runs whose tests check statuses, reasons, files or
    counts, not times: they run beside the fast tests collected before them; tests/conftest.py queues them when the
    session's tests are known and waits for them before the first msrun test. fn's processes must carry
    BACKGROUND_VAR (they outlive the tests they run beside).

    A pytest TempPathFactory among args has its base directory made here, in the calling thread: pytest makes it on
    first use and not thread-safely, so the prefetch thread's first `mktemp` and a test's first `tmp_path` at the same
    moment would each make one (pytest-N and pytest-N+1), and the test's `mktemp` fails comparing them ("... is not a
    normalized and relative path")."""
    from concurrent.futures import ThreadPoolExecutor

    for a in args:
        if hasattr(a, "getbasetemp"):
            a.getbasetemp()
    if not _PREFETCH_POOL:
        _PREFETCH_POOL.append(ThreadPoolExecutor(1, thread_name_prefix="prefetch"))
    _PREFETCHED[name] = _PREFETCH_POOL[0].submit(fn, *args)


def prefetched(name: str, fn, *args):
    """The result of the work `prefetch(name, ...)` started (its exception raised here), else fn(*args) run now."""
    fut = _PREFETCHED.get(name)
    return fut.result() if fut is not None else fn(*args)


def wait_for_prefetches(timeout: float | None = None) -> bool:
    """Block until every prefetched piece of work has ended (its outcome stays with its Future), or for `timeout`
    seconds: whether all have ended."""
    from concurrent.futures import wait

    return not wait(list(_PREFETCHED.values()), timeout=timeout).not_done


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
            if p.pid in self.seen:
                continue
            env = _environ(p)  # read once: a process ending between two reads would lose its BACKGROUND_VAR
            if env is not None and _is_msrun(p, env) and not _background(p, env):
                self.seen[p.pid] = _describe([p])

    def stop(self):
        self._stop_ev.set()
        self.join(5)
        self.scan()
