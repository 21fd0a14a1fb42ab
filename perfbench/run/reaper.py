"""A run's ranks die with the process that launched them, however it dies (even SIGKILL).

The launcher does not start msrun itself but this small process, which then starts msrun:

    python -m perfbench.run.reaper --tag TAG --parent PID -- msrun ...

It asks the kernel (prctl PR_SET_PDEATHSIG) for SIGTERM when its parent (the sweep or tune process)
dies, and on SIGTERM kills every process carrying the run's tag (processes.TAG_VAR): msrun, its
scheduler, its workers (which msrun starts in sessions of their own, out of reach of a process-group
kill) and msrun's `tail -f` helpers. Otherwise it waits for msrun and exits with msrun's exit code.

    python -m perfbench.run.reaper --warm        (then one JSON request line on stdin)

is the same with msrun imported ahead of time: msrun is a Python program whose first act is
`import mindspore` (1.5-2.6 CPU-s, 3-5 s of wall time on a loaded machine), and it starts the scheduler and
the ranks only after it. A sweep or tune starts its next run's reaper this way while the current run
trains, so the import is done when the run is launched; the request (`argv`, `env`, `cwd`, `log`, `tag`)
then runs msrun's own `main()` in this process, exactly as the msrun script does.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys

# kill_run is imported at the top, before any signal can arrive: imported inside the handler, it failed when a
# second signal came while the first handler was importing ("partially initialized module"), and the run's
# `tail -f` processes outlived a SIGKILLed sweep
from perfbench.run.processes import kill_run

PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: the launcher's own clean-up still applies
        return False


def _arm(handler) -> None:
    """SIGTERM and SIGHUP reap the run (the parent's death arrives as SIGTERM)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _reap_and_exit(signum: int, tag: str | None, child: subprocess.Popen | None = None) -> None:
    """Kill msrun (when it is our child) and every process carrying the run's tag, then exit 128 + signum.
    Further SIGTERM/SIGHUP are ignored so that they cannot interrupt the kill passes."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)

    try:
        if child is not None and child.poll() is None:
            try:
                child.kill()
            except OSError:
                pass
        for _ in range(2 if tag else 0):  # a second pass for anything msrun started while it died (`tail -f`)
            if kill_run(tag, grace_s=1.0) == 0:
                break
    finally:
        os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", required=True, help="the run's tag (value of PERFBENCH_RUN_TAG)")
    ap.add_argument("--parent", type=int, required=True, help="pid of the launching process")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- msrun ...")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command

    child: subprocess.Popen | None = None

    def reap(signum, _frame):
        _reap_and_exit(signum, args.tag, child)

    _arm(reap)
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != args.parent:  # the parent died before the death signal was armed
        reap(signal.SIGTERM, None)
    child = subprocess.Popen(cmd)
    while True:
        try:
            return child.wait()
        except InterruptedError:
            continue


def warm_main() -> int:
    """Import msrun, wait for one request on stdin, then be that run's reaper and its msrun."""
    import json

    tag: list[str] = []

    def reap(signum, _frame):
        _reap_and_exit(signum, tag[0] if tag else None)

    _arm(reap)
    _set_parent_death_signal(signal.SIGTERM)
    from mindspore.parallel.cluster import run as msrun  # the import this spare exists for

    line = sys.stdin.readline()
    if not line:  # the launcher closed the pipe: not needed
        return 0
    req = json.loads(line)
    tag.append(req["tag"])
    if os.getppid() != int(req["parent"]):
        reap(signal.SIGTERM, None)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = list(req["argv"])
    code = 0
    try:
        code = msrun.main() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # what the msrun script would print before exiting 1
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code)


if __name__ == "__main__":
    if sys.argv[1:] == ["--warm"]:
        code = warm_main()
        sys.stdout.flush()
        os._exit(code)
    sys.exit(main())
