"""Launch one run's ranks with msrun, watch them, and end them cleanly.

msrun starts a scheduler plus one worker per rank; the workers run in sessions of their own, so a
process-group kill does not reach them. Every process of a run therefore carries the environment
variable PERFBENCH_RUN_TAG, and ending a run kills every process that carries its tag (and every
descendant of msrun seen while it ran) — nothing else (perfbench/run/processes.py). msrun is started under
perfbench.run.reaper, which does the same when the launching process dies, even by SIGKILL.

A failed run's reason names the rank that died first, how (exit code or signal), the last step it finished, and
the first error line of its log, e.g. "rank 1 killed by SIGKILL after step 5" (perfbench/run/failures.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfbench.capture.writer import meta_finished
from perfbench.run import script as script_mod
from perfbench.run.failures import dead_worker, explain_failure
from perfbench.run.processes import TAG_VAR, kill_run, remember_children
from perfbench.startup import PIN_VAR

ENTRY = Path(__file__).resolve().parents[2] / "workloads" / "entry.py"


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
    return script_mod.executable(
        "msrun", "install the training extra (`pip install -e '.[train]'`), which brings MindSpore and msrun"
    )


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


@dataclass
class _Plan:
    """One launch, resolved: its configs, folders, rank counts, port, command, tag and launcher log."""

    run_config_path: Path
    run_config: dict
    launch_cfg: dict
    log_dir: Path
    metrics_dir: Path
    nodes: int
    port: int
    bind: bool
    script: dict | None  # workload script: the user's script in the capture bootstrap
    torch_job: bool  # a PyTorch script, under torchrun
    cmd: list[str]
    tag: str
    msrun_log: str  # msrun's (torchrun's) own output in log_dir

    @property
    def out_dir(self) -> Path:
        return Path(self.run_config["output_dir"])

    @property
    def world_size(self) -> int:
        return self.run_config["world_size"]

    @property
    def local(self) -> int:
        return self.world_size // self.nodes

    @property
    def steps(self) -> int:
        return self.run_config["train"]["steps"]

    @property
    def tool(self) -> str:
        return "torchrun" if self.torch_job else "msrun"


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
    plan = _plan(run_config_path, run_config, launch_cfg)
    if plan.script is not None:
        warm = skip_teardown = False
    env = _rank_env(plan, env_extra)
    t0 = time.time()
    known: dict[int, float] = {}
    ranks: dict[int, int] = {}  # worker pid -> rank, for naming the rank that died
    result = LaunchResult(status="failed", command=plan.cmd, master_port=plan.port, bind_core=plan.bind)
    result.startup["launched"] = time.time()
    with open(plan.log_dir / plan.msrun_log, "wb") as msrun_out:
        # msrun runs under perfbench.run.reaper, which ends the whole run when this process dies (even by SIGKILL)
        spare_env = {k: v for k, v in env.items() if k != TAG_VAR}
        proc = _start(plan, env, _Spare.take(spare_env) if warm else None, msrun_out, result)
        died_first: dict | None = None
        try:
            died_first = _watch(
                plan,
                proc,
                result,
                (known, ranks),
                spare_env if warm else None,
                on_progress=on_progress,
                stop=stop,
                skip_teardown=skip_teardown,
                poll_s=poll_s,
                t0=t0,
            )
        except BaseException:
            kill_run(plan.tag, known)
            raise
        finally:
            if proc.poll() is None or result.reason:
                kill_run(plan.tag, known, grace_s=1.0 if result.teardown_skipped else 3.0)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            # workers that outlive msrun (it should not happen, but never leave orphans)
            kill_run(plan.tag, known)
    result.wall_s = time.time() - t0
    return _conclude(plan, result, ranks, died_first)


def _plan(run_config_path: Path, run_config: dict, launch_cfg: dict) -> _Plan:
    """The launch's folders (created), port, core binding and command: msrun's, or torchrun's for a PyTorch script."""
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
    node_rank = launch_cfg.get("node_rank", 0)
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
            node_rank=node_rank,
        )
    else:
        cmd = msrun_command(
            run_config_path,
            ws,
            log_dir,
            port,
            nodes=nodes,
            node_rank=node_rank,
            master_addr=launch_cfg.get("master_addr", "127.0.0.1"),
            bind_core=bind,
            # how long msrun's cluster waits for every rank to join: start-up under load can take minutes
            cluster_time_out=int(min(float(launch_cfg.get("timeout_s", 900)), 600)),
            entry=script_mod.entry(script) if script is not None else None,
        )
    msrun_log = msrun_log_name(nodes, node_rank)
    return _Plan(
        run_config_path,
        run_config,
        launch_cfg,
        log_dir,
        metrics_dir,
        nodes,
        port,
        bind,
        script,
        torch_job,
        cmd,
        tag=f"{run_config['run_id']}-{uuid.uuid4().hex[:8]}",
        msrun_log=msrun_log.replace("msrun", "torchrun") if torch_job else msrun_log,
    )


def _rank_env(plan: _Plan, env_extra: dict[str, str] | None) -> dict[str, str]:
    """The environment msrun (torchrun) and the ranks start in: this one, tagged, with perfbench's settings."""
    launch_cfg, run_config = plan.launch_cfg, plan.run_config
    env = dict(os.environ)
    env[TAG_VAR] = plan.tag
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
        plan.tag
        if plan.nodes == 1
        else f"{run_config['run_id']}-{launch_cfg.get('master_addr', '127.0.0.1')}-{plan.port}"
    )
    if pins_single_rank(plan.bind, plan.local):
        env[PIN_VAR] = str(min(os.sched_getaffinity(0)))
    if plan.script is not None:
        env["PERFBENCH_RUN_CONFIG"] = str(plan.run_config_path)
        env["PERFBENCH_SETTINGS"] = script_mod.settings_json(run_config)
        env.update(plan.script.get("env") or {})
        if plan.torch_job:
            env["PERFBENCH_WORKER_LOG_DIR"] = str(plan.log_dir)
            if plan.bind:  # torchrun has no --bind_core: the bootstrap pins each local rank (perfbench/capture/run.py)
                env["PERFBENCH_BIND_CORES"] = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
            if plan.nodes > 1 and "GLOO_SOCKET_IFNAME" not in env:  # gloo's peers must reach this node's address
                ifname = script_mod.interface_towards(launch_cfg.get("master_addr", "127.0.0.1"))
                if ifname:
                    env["GLOO_SOCKET_IFNAME"] = ifname
            env.setdefault("OMP_NUM_THREADS", str(run_config.get("threads_per_rank") or 1))
    env.update(env_extra or {})
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _start(plan: _Plan, env: dict, spare: subprocess.Popen | None, msrun_out, result: LaunchResult) -> subprocess.Popen:
    """msrun under perfbench.run.reaper: handed to the warm `spare` (msrun imported already) when there is one,
    else in a reaper started now with its output into `msrun_out`."""
    if spare is not None:  # msrun imported already: hand it this run
        request = {
            "tag": plan.tag,
            "parent": os.getpid(),
            "argv": plan.cmd,
            "env": env,
            "cwd": str(plan.out_dir),
            "log": str(plan.log_dir / plan.msrun_log),
        }
        result.startup["msrun"] = time.time()
        spare.stdin.write((json.dumps(request) + "\n").encode())
        spare.stdin.flush()
        result.startup["warm"] = True
        return spare
    reaper = [sys.executable, "-m", "perfbench.run.reaper", "--tag", plan.tag, "--parent", str(os.getpid()), "--"]
    return subprocess.Popen(
        [*reaper, *plan.cmd],
        cwd=plan.out_dir,
        env=env,
        stdout=msrun_out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _watch(
    plan: _Plan,
    proc: subprocess.Popen,
    result: LaunchResult,
    seen: tuple[dict[int, float], dict[int, int]],
    spare_env: dict | None,
    *,
    on_progress: Callable[[dict[int, int]], None] | None,
    stop: Callable[[dict[int, int]], str | None] | None,
    skip_teardown: bool,
    poll_s: float,
    t0: float,
) -> dict | None:
    """Follow the ranks' steps until msrun exits, `stop` asks, every rank has finished (`skip_teardown`), the run
    times out or hangs (result.reason). `seen`: (pid -> create time, worker pid -> rank), filled as msrun's
    descendants appear. With `spare_env`, the next run's spare is started once this run's processes have imported
    MindSpore (the scheduler writes its start-up file right before init()): its import then overlaps this run's
    cluster join, not this run's own imports, and is over before the first (warm-up) step. Returns the first
    worker that had died when the run timed out or hung (read before the kill, whose signals are not causes)."""
    known, ranks = seen
    timeout_s = float(plan.launch_cfg.get("timeout_s", 900))
    stall_s = float(plan.launch_cfg.get("stall_timeout_s", 180))
    metrics_dir = plan.metrics_dir
    spare_due = spare_env is not None
    last_counts: dict[int, int] = {}
    last_change = time.time()
    while True:
        rc = proc.poll()
        remember_children(proc.pid, known, ranks, result.startup)
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
        if skip_teardown and _all_finished(metrics_dir, counts, plan.local, plan.steps):
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
        return dead_worker(plan.log_dir, ranks, metrics_dir, plan.msrun_log)
    return None


def _conclude(plan: _Plan, result: LaunchResult, ranks: dict[int, int], died_first: dict | None) -> LaunchResult:
    """The launch's outcome once its processes are gone: ok (every rank recorded all its steps, or a crash in
    MindSpore's teardown after that), stopped, or failed with the rank to blame and why."""
    final = count_steps(plan.metrics_dir)
    if result.status == "stopped":
        return result
    if result.reason is None and result.returncode == 0 and plan.script is not None:
        result.status = "ok"  # the script decides its steps; one that recorded none is stored with the reason
        return result
    if result.reason is None and result.returncode == 0:
        missing = [r for r in range(plan.world_size) if final.get(r, 0) < plan.steps]
        if missing and plan.nodes == 1:
            result.reason = f"msrun exited 0 but ranks {missing} did not record all {plan.steps} steps"
        else:
            result.status = "ok"
            return result
    died = dead_worker(plan.log_dir, ranks, plan.metrics_dir, plan.msrun_log)
    if result.reason:  # timed out or hung: only a death seen before perfbench ended the run is a cause
        died = died_first
    if (
        result.reason is None
        and plan.nodes == 1
        and _all_finished(plan.metrics_dir, final, plan.world_size, plan.steps)
    ):
        # every rank recorded all its steps and its final meta (its last write) before something died: a crash
        # in MindSpore's own teardown (seen once in CI: SIGSEGV at exit of a finished pipeline rank) loses nothing
        how = f"rank {died['rank']} {died['how']}" if died is not None and died["rank"] is not None else "msrun failed"
        result.teardown_error = (
            f"{how} in MindSpore's teardown, after every rank had written all its data "
            f"(msrun exit code {result.returncode})"
        )
        result.status = "ok"
        return result
    result.failed_rank, result.log_tail, result.reason = explain_failure(
        plan.log_dir,
        plan.metrics_dir,
        final,
        plan.world_size,
        msrun_log=plan.msrun_log,
        tool=plan.tool,
        returncode=result.returncode,
        reason=result.reason,
        died=died,
        script=plan.script is not None,
    )
    return result


def _all_finished(metrics_dir: Path, counts: dict[int, int], local_ranks: int, steps: int) -> bool:
    """Every local rank recorded all its steps and rewrote its meta with `finished: true` (its last write)."""
    if len(counts) < local_ranks or any(c < steps for c in counts.values()):
        return False
    return all(meta_finished(metrics_dir, rank) for rank in counts)


def msrun_log_name(nodes: int, node_rank: int) -> str:
    """msrun's own output in the run's logs folder: one per node when the nodes share the folder."""
    return "msrun.out" if nodes == 1 else f"msrun-node{node_rank}.out"


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True))
