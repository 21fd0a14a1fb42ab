"""Launch one run's ranks with msrun, watch them, and end them cleanly.

msrun starts a scheduler plus one worker per rank; the workers run in sessions of their own, so a
process-group kill does not reach them. Every process of a run therefore carries the environment
variable PERFBENCH_RUN_TAG, and ending a run kills every process that carries its tag (and every
descendant of msrun seen while it ran) — nothing else. msrun is started under perfbench.run.reaper, which
does the same when the launching process dies, even by SIGKILL.

A failed run's reason names the rank that died first (from msrun's "Worker process PID exit with
exception. Error code: C" line and the pids seen while it ran), how (exit code or signal), the last step
it finished, and the first error line of its log, e.g. "rank 1 killed by SIGKILL after step 5".
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from perfbench.capture.writer import meta_finished
from perfbench.errors import UserError
from perfbench.run import script as script_mod
from perfbench.startup import PIN_VAR, process_started

ENTRY = Path(__file__).resolve().parents[2] / "workloads" / "entry.py"
TAG_VAR = "PERFBENCH_RUN_TAG"


@dataclass
class LaunchResult:
    status: str  # "ok" | "failed" | "stopped" (ended on purpose by the caller's `stop`, e.g. a pruned trial)
    reason: str | None = None  # one line: why it failed or was stopped
    failed_rank: int | None = None
    log_tail: str = ""  # last lines of the failing rank's log (or msrun's)
    returncode: int | None = None
    wall_s: float = 0.0
    command: list[str] = field(default_factory=list)
    master_port: int | None = None
    bind_core: bool = False
    teardown_skipped: bool = False
    teardown_error: str | None = None  # a rank died after every rank had written all its data (kept as ok)
    slurm: dict | None = None  # launch.backend slurm: the job (id, state, reason, nodes); perfbench.run.slurm
    #: start-up timeline: when msrun was started ("launched") and msrun, its scheduler and each worker
    #: (by rank) were created, time.time() seconds (perfbench/startup.py)
    startup: dict = field(default_factory=dict)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads_per_rank(local_ranks: int, cpus: int | None = None) -> int:
    cpus = cpus or len(os.sched_getaffinity(0))
    return max(1, cpus // max(1, local_ranks))


def should_bind(bind_core, local_ranks: int, cpus: int | None = None) -> bool:
    """msrun --bind_core pins rank i to core i: worth it when every rank gets a core of its own."""
    cpus = cpus or len(os.sched_getaffinity(0))
    if bind_core == "auto":
        return 1 < local_ranks <= cpus
    return bool(bind_core)


def pins_single_rank(bind: bool, local_ranks: int, cpus: int | None = None) -> bool:
    """A single local rank with bind_core on a machine of several CPUs: msrun --bind_core gives such a worker every
    core, so the rank pins itself to the first one (PERFBENCH_PIN_CORE, workloads/runner.py) and runs 1-thread pools."""
    cpus = cpus or len(os.sched_getaffinity(0))
    return bool(bind) and local_ranks == 1 and cpus > 1


def msrun_executable() -> str:
    """The msrun that belongs to this interpreter's MindSpore (falls back to PATH)."""
    beside = Path(sys.executable).parent / "msrun"
    if beside.exists():
        return str(beside)
    import shutil

    found = shutil.which("msrun")
    if not found:
        raise UserError(
            "msrun not found: install the training extra (`pip install -e '.[train]'`), "
            "which brings MindSpore and msrun"
        )
    return found


def msrun_command(
    run_config: Path,
    world_size: int,
    log_dir: Path,
    master_port: int,
    *,
    nodes: int = 1,
    node_rank: int = 0,
    master_addr: str = "127.0.0.1",
    bind_core: bool = False,
    cluster_time_out: int = 120,
    entry: list[str] | None = None,
) -> list[str]:
    local = world_size // nodes
    cmd = [
        msrun_executable(),
        f"--worker_num={world_size}",
        f"--local_worker_num={local}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        f"--log_dir={log_dir}",
        "--join=True",
        f"--cluster_time_out={cluster_time_out}",
    ]
    if nodes > 1:
        cmd.append(f"--node_rank={node_rank}")
    if bind_core:
        cmd.append("--bind_core=True")
    cmd += entry if entry is not None else [str(ENTRY), "--config", str(run_config)]
    return cmd


def _tagged(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid == os.getpid():
                continue
            if p.environ().get(TAG_VAR) == tag:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return out


def kill_run(tag: str, known: dict[int, float] | None = None, grace_s: float = 3.0) -> int:
    """SIGTERM, then SIGKILL, every process of the run (by tag, plus known pid/create-time pairs)."""
    procs: dict[int, psutil.Process] = {p.pid: p for p in _tagged(tag)}
    for pid, created in (known or {}).items():
        if pid in procs:
            continue
        try:
            p = psutil.Process(pid)
            if abs(p.create_time() - created) < 0.01:
                procs[pid] = p
        except psutil.NoSuchProcess:
            pass
    terminate(list(procs.values()), grace_s)
    return len(procs)


def terminate(procs: list[psutil.Process], grace_s: float, kill_wait_s: float | None = None) -> None:
    """SIGTERM each process, SIGKILL those still alive after grace_s, then wait (kill_wait_s, default grace_s)."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s if kill_wait_s is None else kill_wait_s)


def kill_stale(run_id: str, rounds: int = 5) -> int:
    """Kill processes left by an earlier attempt of this run (e.g. a sweep killed with SIGKILL). Scans
    again until none is left: msrun may start a process (e.g. `tail -f` of a worker log when a worker
    dies) between one scan and its own death."""
    killed = 0
    for _ in range(rounds):
        stale = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and p.environ().get(TAG_VAR, "").startswith(f"{run_id}-"):
                    stale.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        if not stale:
            break
        for p in stale:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(stale, timeout=5)
        killed += len(stale)
    return killed


def count_steps(metrics_dir: Path) -> dict[int, int]:
    """Finished steps per rank, from the workload's steps.jsonl files (cheap: counts lines)."""
    out = {}
    for f in metrics_dir.glob("rank*.steps.jsonl"):
        try:
            rank = int(f.name.split(".")[0][4:])
            with open(f, "rb") as fh:
                out[rank] = sum(1 for line in fh if line.endswith(b"\n"))
        except (ValueError, OSError):
            continue
    return out


class _Spare:
    """The next run's reaper, started ahead with msrun already imported (`perfbench.run.reaper --warm`): a sweep or
    tune launches runs one after another, so the next one's `import mindspore` in msrun overlaps this one's
    training instead of delaying the next scheduler and ranks (perfbench/startup.py measures it)."""

    proc: subprocess.Popen | None = None

    @classmethod
    def take(cls, env: dict) -> subprocess.Popen | None:
        proc, cls.proc = cls.proc, None
        if proc is not None and proc.poll() is None and getattr(proc, "_pb_key", None) == _spare_key(env):
            return proc
        if proc is not None:
            cls._end(proc)
        return None

    @classmethod
    def start(cls, env: dict) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfbench.run.reaper", "--warm"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        proc._pb_key = _spare_key(env)  # type: ignore[attr-defined]
        return proc

    @classmethod
    def close(cls) -> None:
        """End the idle spare (the end of a sweep or search); it also exits by itself when its parent does."""
        proc, cls.proc = cls.proc, None
        if proc is not None:
            cls._end(proc)

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        try:
            proc.stdin.close()  # EOF: an idle spare exits
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=10)


def _spare_key(env: dict) -> tuple:
    """What a spare's own start depends on: the interpreter and its import path."""
    return (sys.executable, env.get("PYTHONPATH"), env.get("PATH"))


close_spare = _Spare.close


def launch(
    run_config_path: Path,
    run_config: dict,
    launch_cfg: dict,
    *,
    on_progress: Callable[[dict[int, int]], None] | None = None,
    stop: Callable[[dict[int, int]], str | None] | None = None,
    env_extra: dict[str, str] | None = None,
    skip_teardown: bool = False,
    warm: bool = False,
    poll_s: float = 0.2,
) -> LaunchResult:
    """Run one configuration through msrun and wait for it, within launch_cfg's timeouts.

    `stop(steps done per rank)` is asked whenever a rank finishes a step; a non-empty answer (the reason)
    ends the run at once (every process of its tag killed) with status "stopped". `env_extra` is added
    to the ranks' environment. `skip_teardown`: once every rank has recorded all its steps and its final
    meta (`finished: true`, written after the profiler and summary output), end the run instead of
    waiting for MindSpore's cluster teardown (measured: 5-10 s per run, docs/tune.md). `warm`: run msrun in
    a spare reaper started with msrun already imported (and start the next run's spare now); the caller
    ends the last spare with `close_spare()`."""
    out_dir = Path(run_config["output_dir"])
    log_dir = out_dir / "logs"
    metrics_dir = out_dir / "metrics"
    log_dir.mkdir(parents=True, exist_ok=True)
    metrics_dir.mkdir(parents=True, exist_ok=True)
    ws = run_config["world_size"]
    nodes = launch_cfg.get("nodes", 1)
    local = ws // nodes
    port = free_port() if launch_cfg.get("master_port", "auto") == "auto" else int(launch_cfg["master_port"])
    bind = should_bind(launch_cfg.get("bind_core", "auto"), local)
    # workload script: the user's script in the capture bootstrap, under msrun (MindSpore) or torchrun (PyTorch)
    script = run_config.get("script") if run_config.get("workload") == "script" else None
    torch_job = script is not None and script.get("framework") == "pytorch"
    tool = "torchrun" if torch_job else "msrun"
    if script is not None:
        warm = skip_teardown = False
    if torch_job:
        # only when asked (true): pinned, a rank shares its one core with gloo's threads, which then cannot
        # overlap its all-reduces with backward on a core of their own
        bind = launch_cfg.get("bind_core", "auto") is True
        cmd = script_mod.torchrun_command(
            local,
            port,
            script,
            master_addr=launch_cfg.get("master_addr", "127.0.0.1"),
            nodes=nodes,
            node_rank=launch_cfg.get("node_rank", 0),
        )
    else:
        cmd = msrun_command(
            run_config_path,
            ws,
            log_dir,
            port,
            nodes=nodes,
            node_rank=launch_cfg.get("node_rank", 0),
            master_addr=launch_cfg.get("master_addr", "127.0.0.1"),
            bind_core=bind,
            # how long msrun's cluster waits for every rank to join: start-up under load can take minutes
            cluster_time_out=int(min(float(launch_cfg.get("timeout_s", 900)), 600)),
            entry=script_mod.entry(script) if script is not None else None,
        )
    tag = f"{run_config['run_id']}-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env[TAG_VAR] = tag
    # msrun starts workers as `python script.py`: make that the interpreter running perfbench
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("GLOG_v", "2")  # MindSpore: warnings and errors only
    # MCCL gives up on a CPU collective after ~60 s by default: on a loaded machine one rank's graph
    # compilation can take longer than that while its peer already waits in the first all-reduce.
    # perfbench's own stall timeout decides when a run is hung, so let MindSpore wait longer than it.
    env.setdefault("MS_CPU_COMM_OP_TIMEOUT", str(int(launch_cfg.get("stall_timeout_s", 180)) + 60))
    # A worker learns that the cluster is complete from its next heartbeat to the scheduler, sent every 3-5 s
    # by default (MS_RETRY_INTERVAL_LOWER/UPPER): every launch waited that long after its last rank registered.
    # One heartbeat a second costs the scheduler nothing at these sizes (measured: docs/benchmarks.md).
    env.setdefault("MS_RETRY_INTERVAL_LOWER", "1")
    env.setdefault("MS_RETRY_INTERVAL_UPPER", "1")
    env["PYTHONUNBUFFERED"] = "1"
    # the ranks' file barrier (workloads/runner.py) needs one name on every node of this attempt
    env["PERFBENCH_SYNC_TAG"] = (
        tag if nodes == 1 else f"{run_config['run_id']}-{launch_cfg.get('master_addr', '127.0.0.1')}-{port}"
    )
    if pins_single_rank(bind, local):
        env[PIN_VAR] = str(min(os.sched_getaffinity(0)))
    if script is not None:
        env["PERFBENCH_RUN_CONFIG"] = str(run_config_path)
        env["PERFBENCH_SETTINGS"] = script_mod.settings_json(run_config)
        env.update(script.get("env") or {})
        if torch_job:
            env["PERFBENCH_WORKER_LOG_DIR"] = str(log_dir)
            if bind:  # torchrun has no --bind_core: the bootstrap pins each local rank (perfbench/capture/run.py)
                env["PERFBENCH_BIND_CORES"] = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
            if nodes > 1 and "GLOO_SOCKET_IFNAME" not in env:  # gloo's peers must reach this node's address
                ifname = script_mod.interface_towards(launch_cfg.get("master_addr", "127.0.0.1"))
                if ifname:
                    env["GLOO_SOCKET_IFNAME"] = ifname
            env.setdefault("OMP_NUM_THREADS", str(run_config.get("threads_per_rank") or 1))
    env.update(env_extra or {})
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    timeout_s = float(launch_cfg.get("timeout_s", 900))
    stall_s = float(launch_cfg.get("stall_timeout_s", 180))
    t0 = time.time()
    known: dict[int, float] = {}
    ranks: dict[int, int] = {}  # worker pid -> rank, for naming the rank that died
    result = LaunchResult(status="failed", command=cmd, master_port=port, bind_core=bind)
    node_rank = launch_cfg.get("node_rank", 0)
    msrun_log = (
        msrun_log_name(nodes, node_rank).replace("msrun", "torchrun") if torch_job else msrun_log_name(nodes, node_rank)
    )
    result.startup["launched"] = time.time()
    with open(log_dir / msrun_log, "wb") as msrun_out:
        # msrun runs under perfbench.run.reaper, which ends the whole run when this process dies (even by SIGKILL)
        spare_env = {k: v for k, v in env.items() if k != TAG_VAR}
        proc = _Spare.take(spare_env) if warm else None
        if proc is not None:  # msrun imported already: hand it this run
            request = {
                "tag": tag,
                "parent": os.getpid(),
                "argv": cmd,
                "env": env,
                "cwd": str(out_dir),
                "log": str(log_dir / msrun_log),
            }
            result.startup["msrun"] = time.time()
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            result.startup["warm"] = True
        else:
            reaper = [
                sys.executable,
                "-m",
                "perfbench.run.reaper",
                "--tag",
                tag,
                "--parent",
                str(os.getpid()),
                "--",
                *cmd,
            ]
            proc = subprocess.Popen(
                reaper,
                cwd=out_dir,
                env=env,
                stdout=msrun_out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # the next run's spare is started once this run's processes have imported MindSpore (the scheduler
        # writes its start-up file right before init()): its import then overlaps this run's cluster join,
        # not this run's own imports, and is over before the first (warm-up) step
        spare_due = warm
        last_counts: dict[int, int] = {}
        last_change = time.time()
        died_first: dict | None = None
        try:
            while True:
                rc = proc.poll()
                _remember_children(proc.pid, known, ranks, result.startup)
                if spare_due and ((metrics_dir / "scheduler.startup.json").exists() or time.time() - t0 > 60):
                    spare_due = False
                    _Spare.proc = _Spare.start(spare_env)
                counts = count_steps(metrics_dir)
                if counts != last_counts:
                    last_counts, last_change = counts, time.time()
                    if on_progress:
                        on_progress(counts)
                    why = stop(counts) if stop and rc is None else None
                    if why:
                        result.status, result.reason = "stopped", why
                        break
                if rc is not None:
                    result.returncode = rc
                    break
                if skip_teardown and _all_finished(metrics_dir, counts, ws // nodes, run_config["train"]["steps"]):
                    result.returncode = 0
                    result.teardown_skipped = True
                    break
                now = time.time()
                if now - t0 > timeout_s:
                    result.reason = f"timed out after {timeout_s:.0f} s (launch.timeout_s)" + (
                        "" if sum(counts.values()) else "; no rank finished step 1"
                    )
                    break
                if sum(counts.values()) > 0 and now - last_change > stall_s:
                    result.reason = (
                        f"hung: no rank finished a step for {stall_s:.0f} s (launch.stall_timeout_s); "
                        f"steps done per rank: {dict(sorted(counts.items()))}"
                    )
                    break
                time.sleep(poll_s)
            if result.reason:  # a rank that had died already (read before the kill, whose signals are not causes)
                died_first = dead_worker(log_dir, ranks, metrics_dir, msrun_log)
        except BaseException:
            kill_run(tag, known)
            raise
        finally:
            if proc.poll() is None or result.reason:
                kill_run(tag, known, grace_s=1.0 if result.teardown_skipped else 3.0)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            # workers that outlive msrun (it should not happen, but never leave orphans)
            kill_run(tag, known)
    result.wall_s = time.time() - t0
    final = count_steps(metrics_dir)
    if result.status == "stopped":
        return result
    if result.reason is None and result.returncode == 0 and script is not None:
        result.status = "ok"  # the script decides its steps; one that recorded none is stored with the reason
        return result
    if result.reason is None and result.returncode == 0:
        missing = [r for r in range(ws) if final.get(r, 0) < run_config["train"]["steps"]]
        if missing and nodes == 1:
            result.reason = (
                f"msrun exited 0 but ranks {missing} did not record all {run_config['train']['steps']} steps"
            )
        else:
            result.status = "ok"
            return result
    died = dead_worker(log_dir, ranks, metrics_dir, msrun_log)
    if result.reason:  # timed out or hung: only a death seen before perfbench ended the run is a cause
        died = died_first
    if result.reason is None and nodes == 1 and _all_finished(metrics_dir, final, ws, run_config["train"]["steps"]):
        # every rank recorded all its steps and its final meta (its last write) before something died: a crash
        # in MindSpore's own teardown (seen once in CI: SIGSEGV at exit of a finished pipeline rank) loses nothing
        how = f"rank {died['rank']} {died['how']}" if died is not None and died["rank"] is not None else "msrun failed"
        result.teardown_error = (
            f"{how} in MindSpore's teardown, after every rank had written all its data "
            f"(msrun exit code {result.returncode})"
        )
        result.status = "ok"
        return result
    rank, tail = failing_rank(log_dir, final, ws, msrun_log)
    if died is not None and died["rank"] is not None:
        rank = died["rank"]
        f = log_dir / f"worker_{rank}.log"
        tail = _tail(f.read_text(errors="replace")) if f.exists() else tail
    if script is not None and rank is None:  # no rank to blame (all stuck alike): every rank's last lines
        tail = _ranks_tails(log_dir, ws) or tail
    result.failed_rank = rank
    result.log_tail = tail
    if result.reason is None:
        if died is not None and died["rank"] is not None:
            result.reason = (
                f"rank {rank} {died['how']} {_after_step(metrics_dir, rank)} "
                f"({tool} exit code {result.returncode})" + _first_error(tail)
            )
        else:
            who = f"rank {rank}" if rank is not None else "msrun"
            result.reason = (
                f"{who} failed {_after_step(metrics_dir, rank)} ({tool} exit code {result.returncode})"
                if rank is not None
                else f"{tool} failed ({tool} exit code {result.returncode})"
            ) + _first_error(tail)
    elif died is not None and died["rank"] is not None:  # a rank had died, and its launcher had not ended the run
        result.reason = (
            f"rank {rank} {died['how']} {_after_step(metrics_dir, rank)} ({tool} log), then {result.reason}"
            + _first_error(tail)
        )
    elif rank is not None:
        result.reason += f"; rank {rank} stopped first" + _first_error(tail)
    if script is not None and not any(
        (log_dir / f"worker_{r}.log").exists() and (log_dir / f"worker_{r}.log").stat().st_size for r in range(ws)
    ):
        result.reason += "; the script printed nothing (every rank's log is empty)"
    return result


def _all_finished(metrics_dir: Path, counts: dict[int, int], local_ranks: int, steps: int) -> bool:
    """Every local rank recorded all its steps and rewrote its meta with `finished: true` (its last write)."""
    if len(counts) < local_ranks or any(c < steps for c in counts.values()):
        return False
    return all(meta_finished(metrics_dir, rank) for rank in counts)


def _remember_children(
    pid: int, known: dict[int, float], ranks: dict[int, int] | None = None, spawned: dict | None = None
) -> None:
    """Record msrun's descendants (pid → create time) and, the first time each is seen, which worker rank
    it is and (into `spawned`) when msrun, its scheduler and its workers were created."""
    try:
        for c in psutil.Process(pid).children(recursive=True):
            try:
                if c.pid not in known and ranks is not None:
                    env = c.environ()
                    role = env.get("MS_ROLE")
                    if role == "MS_WORKER" and env.get("MS_NODE_ID", "").isdigit():
                        ranks[c.pid] = int(env["MS_NODE_ID"])
                    if spawned is not None:
                        if role == "MS_WORKER" and env.get("MS_NODE_ID", "").isdigit():
                            # a rank's own children inherit its environment: the rank is the earliest of them
                            w = spawned.setdefault("workers", {})
                            ts = process_started(c.pid)
                            if ts is not None and (w.get(env["MS_NODE_ID"]) is None or ts < w[env["MS_NODE_ID"]]):
                                w[env["MS_NODE_ID"]] = ts
                        elif role == "MS_SCHED":
                            ts = process_started(c.pid)
                            if ts is not None and ts < spawned.get("scheduler", float("inf")):
                                spawned["scheduler"] = ts
                        elif c.ppid() == pid and "msrun" not in spawned:
                            spawned["msrun"] = process_started(c.pid)
                known.setdefault(c.pid, c.create_time())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                pass
    except psutil.NoSuchProcess:
        pass


_WORKER_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")
#: torchrun's summary of a failed run: "Root Cause (first observed failure): ... rank : R (local_rank: L)
#: exitcode : C (pid: P)"
_TORCHRUN_ROOT = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)", re.S
)


def describe_exit(code: int) -> str:
    """msrun's worker return code as words: negative = killed by that signal (Popen convention)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def msrun_log_name(nodes: int, node_rank: int) -> str:
    """msrun's own output in the run's logs folder: one per node when the nodes share the folder."""
    return "msrun.out" if nodes == 1 else f"msrun-node{node_rank}.out"


def dead_worker(log_dir: Path, ranks: dict[int, int], metrics_dir: Path, msrun_log: str = "msrun.out") -> dict | None:
    """The first worker msrun saw die (msrun logs "Worker process PID exit with exception. Error code: C"
    and then kills the others), as {"pid", "code", "how", "rank"}; rank from the pids seen while the run
    ran, else from the ranks' meta.json. None when msrun logged no such line."""
    f = log_dir / msrun_log
    text = f.read_text(errors="replace") if f.exists() else ""
    m = _WORKER_EXIT.search(text)
    if m is None:
        t = _TORCHRUN_ROOT.search(text)  # torchrun names the rank that failed first and its exit code
        if t is None:
            return None
        code = int(t.group(2))
        return {"pid": int(t.group(3)), "code": code, "how": describe_exit(code), "rank": int(t.group(1))}
    pid, code = int(m.group(1)), int(m.group(2))
    rank = ranks.get(pid)
    if rank is None:
        for meta in metrics_dir.glob("rank*.meta.json"):
            try:
                d = json.loads(meta.read_text())
            except (OSError, ValueError):
                continue
            if d.get("pid") == pid:
                rank = int(d.get("rank"))
    return {"pid": pid, "code": code, "how": describe_exit(code), "rank": rank}


def last_step(metrics_dir: Path, rank: int) -> int | None:
    """The last step a rank finished (its steps.jsonl's last complete line), None before its first."""
    f = metrics_dir / f"rank{rank}.steps.jsonl"
    try:
        lines = f.read_bytes().split(b"\n")
    except OSError:
        return None
    for line in reversed(lines):  # the last line may be half-written
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def _after_step(metrics_dir: Path, rank: int | None) -> str:
    s = last_step(metrics_dir, rank) if rank is not None else None
    return "before finishing a step" if s is None else f"after step {s}"


_OWN_FAILURE = (
    "[perfbench] inject",
    "Traceback (most recent call last)",
    "Segmentation fault",
    "core dumped",
    "perfbench: error:",
    "MemoryError",
    "Killed",
)


def failing_rank(
    log_dir: Path, steps: dict[int, int], world_size: int, msrun_log: str = "msrun.out"
) -> tuple[int | None, str]:
    """Which rank failed first. A rank whose own log shows why it died (injected failure, Python
    traceback, crash) wins, earliest such log first; otherwise the one rank with fewer finished steps
    than all others. With no such evidence it returns None rather than guess. Peers of a dead rank
    fail later, in collectives."""

    def own_failure(text: str) -> int | None:
        hits = [text.find(m) for m in _OWN_FAILURE if m in text]
        return min(hits) if hits else None

    candidates = []
    for r in range(world_size):
        f = log_dir / f"worker_{r}.log"
        if f.exists():
            text = f.read_text(errors="replace")
            pos = own_failure(text)
            if pos is not None:
                injected = "[perfbench] inject" in text
                candidates.append((0 if injected else 1, steps.get(r, 0), f.stat().st_mtime, r, text))
    if candidates:
        candidates.sort(key=lambda c: c[:3])
        r, text = candidates[0][3], candidates[0][4]
        return r, _tail(text)
    fewest = min((steps.get(i, 0) for i in range(world_size)), default=0)
    behind = [i for i in range(world_size) if steps.get(i, 0) == fewest]
    if len(behind) == 1:  # one rank alone stopped making progress
        r = behind[0]
        f = log_dir / f"worker_{r}.log"
        return r, (_tail(f.read_text(errors="replace")) if f.exists() else "")
    f = log_dir / msrun_log  # no evidence which rank it was: say so rather than guess
    return None, _tail(f.read_text(errors="replace")) if f.exists() else ""


def _ranks_tails(log_dir: Path, world_size: int, n: int = 8) -> str:
    """The last `n` lines of every rank's log, each headed by its file name (empty logs left out)."""
    parts = []
    for r in range(world_size):
        f = log_dir / f"worker_{r}.log"
        text = _tail(f.read_text(errors="replace"), n) if f.exists() else ""
        if text:
            parts.append(f"==> worker_{r}.log <==\n{text}")
    return "\n".join(parts)


def _tail(text: str, n: int = 25) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def _first_error(tail: str) -> str:
    for line in reversed(tail.splitlines()):
        s = line.strip()
        if s and (s.split(":")[0].endswith(("Error", "Exception", "Exit")) or "[perfbench] inject" in s):
            return f": {s[:300]}"
    return ""


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))
