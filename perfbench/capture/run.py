"""The bootstrap every rank of a `workload: script` run starts in (perfbench/run/launcher.py):

    msrun    ... perfbench/capture/run.py SCRIPT ARGS...
    torchrun ... perfbench/capture/run.py SCRIPT ARGS...

It installs the step capture of the script's framework (MindSpore: a Callback added to every `Model.train`;
PyTorch: optimizer step hooks), runs the script as `__main__` with its own argv, unchanged, and writes the
rank's final meta (exit status, error) however the script ends. PyTorch ranks' output goes to
`logs/worker_{rank}.log`, as msrun's does.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # started as a file: its folder must not shadow anything the script imports
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == _here:
        sys.path.pop(0)

import runpy  # noqa: E402
import traceback  # noqa: E402

from perfbench.capture import ms_capture, torch_capture  # noqa: E402
from perfbench.capture.recorder import current, env_rank  # noqa: E402

LOG_VAR = "PERFBENCH_WORKER_LOG_DIR"  # set for torchrun: each rank writes its output to worker_{rank}.log there
#: set for torchrun with launch.bind_core: the CPUs the local ranks pin to, one each (torchrun has no --bind_core;
#: msrun's does the same for MindSpore ranks)
CORES_VAR = "PERFBENCH_BIND_CORES"


def pin_local_rank(environ=os.environ) -> int | None:
    """Pin this process to its local rank's CPU of PERFBENCH_BIND_CORES (LOCAL_RANK-th, wrapping): the CPU, or None
    when not asked to or not possible (no LOCAL_RANK, a CPU outside this process's affinity)."""
    cores = [int(c) for c in environ.get(CORES_VAR, "").split(",") if c.strip().isdigit()]
    local = environ.get("LOCAL_RANK", "")
    if not cores or not local.isdigit():
        return None
    cpu = cores[int(local) % len(cores)]
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        return None
    return cpu


def _redirect_output(rank: int) -> None:
    folder = os.environ.get(LOG_VAR)
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, f"worker_{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m perfbench.capture.run SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script = os.path.abspath(argv[0])
    _redirect_output(env_rank())
    pin_local_rank()
    rec = current()  # None for msrun's scheduler process and outside perfbench
    if rec is not None:
        fw = (rec.config.get("script") or {}).get("framework")
        if fw == "mindspore":
            ms_capture.install(rec)
        elif fw == "pytorch":
            torch_capture.install(rec)
        rec.set_meta(script=script, argv=argv[1:])
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(script))
    status, error = 0, None
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status = code if isinstance(code, int) else (0 if code is None else 1)
        if status:
            error = f"the script exited with {code!r}"
        _finish(rec, status, error)
        raise
    except BaseException as exc:
        traceback.print_exc()
        _finish(rec, 1, f"{type(exc).__name__}: {exc}"[:500])
        # The rank ends here, without the interpreter's teardown: a MindSpore rank's would wait on its peers'
        # collectives for minutes (a crash would read as a hang), and a PyTorch rank's destroys gloo's threads
        # mid-collective, which aborts at random (SIGABRT, "terminate called without an active exception"), so the
        # same raise would read as a signal one time and as exit code 1 the next. The launcher sees exit code 1 now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    _finish(rec, status, error)
    return status


def _finish(rec, status: int, error: str | None) -> None:
    if rec is None:
        return
    if rec.config.get("script", {}).get("framework") == "pytorch":
        if rec.meta.get("comm_backend") in (None, "none"):
            rec.set_meta(comm_backend=torch_capture.backend_name() or rec.meta.get("comm_backend") or "none")
    rec.finish(status, error)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
