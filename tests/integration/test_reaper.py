"""The run reaper (perfbench/run/reaper.py) on plain processes, no MindSpore: signals that arrive back to back
(the parent's death signal and a hang-up, say) must still end with every tagged process killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from perfbench.run.launcher import TAG_VAR
from tests.support import ROOT


def _tagged(tag):
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.environ().get(TAG_VAR) == tag:
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def _kill_all(tag, proc):
    """Clean-up whatever the test's processes left, whatever the outcome."""
    for pid in _tagged(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if proc.poll() is None:
        proc.kill()


# tagged processes are a run's processes to the suite's watcher (tests/conftest.py), so this is in the msrun lane
# although it starts no MindSpore (~3 s)
@pytest.mark.msrun
def test_back_to_back_signals_still_kill_every_tagged_process():
    tag = f"reaper-test-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, **{TAG_VAR: tag})
    # the "msrun" the reaper runs starts a grandchild in its own session (like msrun's workers and `tail -f`),
    # which a process-group kill would miss
    script = "import subprocess, time; subprocess.Popen(['sleep', '300'], start_new_session=True); time.sleep(300)"
    reaper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfbench.run.reaper",
            "--tag",
            tag,
            "--parent",
            str(os.getpid()),
            "--",
            sys.executable,
            "-c",
            script,
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.time() + 60
        while len(_tagged(tag)) < 3 and time.time() < deadline:  # reaper, its child, the grandchild
            time.sleep(0.2)
        assert len(_tagged(tag)) >= 3, "the test's processes did not start"
        reaper.send_signal(signal.SIGTERM)
        reaper.send_signal(signal.SIGHUP)
        reaper.send_signal(signal.SIGTERM)
        assert reaper.wait(timeout=30) in (128 + signal.SIGTERM, 128 + signal.SIGHUP)
        deadline = time.time() + 10
        while _tagged(tag) and time.time() < deadline:
            time.sleep(0.2)
        assert _tagged(tag) == [], "tagged processes outlived the reaper"
    finally:
        _kill_all(tag, reaper)


@pytest.mark.msrun
def test_warm_reaper_survives_back_to_back_signals_and_kills_the_run(tmp_path):
    """The spare msrun a sweep starts ahead (`python -m perfbench.run.reaper --warm`): once it runs a request, a
    SIGTERM, SIGHUP, SIGTERM in a row must still kill msrun's scheduler, workers and `tail -f` helpers.
    (Seen in CI: the handler's lazy import was interrupted by the second signal and nothing was killed.)"""
    import json

    from tests.support import free_port

    tag = f"reaper-warm-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "idle.py"
    script.write_text("import time\ntime.sleep(300)\n")  # scheduler and worker alike: no MindSpore needed
    env = dict(os.environ, **{TAG_VAR: tag})
    req = {
        "argv": [
            "msrun",
            "--worker_num=1",
            "--local_worker_num=1",
            f"--master_port={free_port()}",
            f"--log_dir={tmp_path / 'logs'}",
            "--join=True",
            "--tail_worker_log=0",
            str(script),
        ],
        "env": env,
        "cwd": str(tmp_path),
        "log": str(tmp_path / "msrun.out"),
        "tag": tag,
        "parent": os.getpid(),
    }
    warm = subprocess.Popen(
        [sys.executable, "-m", "perfbench.run.reaper", "--warm"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        warm.stdin.write((json.dumps(req) + "\n").encode())
        warm.stdin.flush()
        deadline = time.time() + 120
        while len(_tagged(tag)) < 3 and time.time() < deadline:  # scheduler, worker, tail -f
            time.sleep(0.2)
        assert len(_tagged(tag)) >= 3, (tmp_path / "msrun.out").read_text()[-2000:]
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGTERM):  # spaced so that some land inside the handler
            warm.send_signal(sig)
            time.sleep(0.003)
        warm.wait(timeout=30)
        deadline = time.time() + 10
        while _tagged(tag) and time.time() < deadline:
            time.sleep(0.2)
        assert _tagged(tag) == [], (
            "msrun's processes outlived the warm reaper: " + (tmp_path / "msrun.out").read_text()[-2000:]
        )
    finally:
        _kill_all(tag, warm)
