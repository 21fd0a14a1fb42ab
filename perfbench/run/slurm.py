"""`launch.backend: slurm`: each run is one Slurm job; msrun (or torchrun, for a PyTorch `workload: script`) runs
on every allocated node.

The sweep writes the job's batch script into the run's artifacts (`artifacts/slurm/job.sh`) and submits it
with `sbatch`. The script runs one task per node (`srun --ntasks-per-node=1`): `python -m perfbench.run.slurm
node SPEC` takes its node rank from Slurm (SLURM_NODEID), the first node of the allocation (`scontrol show
hostnames`) as msrun's master, and launches that node's ranks with perfbench.run.launcher (the same msrun
command line, tags and failure reading as a local run), writing into the shared results folder. Each node
leaves `artifacts/slurm/node{K}.json` with its outcome.

The sweep follows the job with `scontrol show job` (`sacct` once Slurm forgot it): pending (with Slurm's
reason), running (rank-steps from the shared metrics folder), done. It cancels the job (`scancel`) on
launch.timeout_s (counted from the job's start, not its time in the queue), on Ctrl-C and when a caller's
`stop` asks; a failed job is recorded with Slurm's own state and reason (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
CANCELLED, FAILED) and the failing rank's log tail. The job id is stored in the run record right after
submission, so `sweep --resume` re-attaches to a job that is still queued or running.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from perfbench.errors import UserError
from perfbench.run.failures import failing_rank, first_raised, raised_account
from perfbench.run.launcher import LaunchResult, count_steps, launch
from perfbench.run.processes import kill_stale

ROOT = Path(__file__).resolve().parents[2]
#: states after which a job runs no more (squeue/scontrol/sacct spell them alike)
FINAL = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
)
#: what a final state means, in words (Slurm's own state name is kept beside it)
MEANING = {
    "COMPLETED": "completed",
    "FAILED": "failed (a task exited non-zero)",
    "CANCELLED": "was cancelled",
    "TIMEOUT": "reached its time limit",
    "NODE_FAIL": "lost a node (node failure)",
    "OUT_OF_MEMORY": "ran out of memory",
    "PREEMPTED": "was preempted",
    "BOOT_FAIL": "could not boot its nodes",
    "DEADLINE": "missed its deadline",
}


@dataclass
class JobInfo:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, TIMEOUT, ... or UNKNOWN
    reason: str | None = None  # Slurm's Reason (why pending, or why it ended), None when "None"
    exit_code: str | None = None  # "rc:signal"
    nodes: str | None = None  # NodeList, e.g. "node[1-2]"
    source: str = "scontrol"
    raw: dict = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.state in FINAL


def slurm_tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise UserError(
            f"{name} not found: launch.backend slurm needs Slurm's commands (sbatch, scontrol, scancel) "
            "on PATH; run the sweep on a login node of the cluster (for a test cluster on this "
            "machine: `make slurm-up`, then export the SLURM_CONF it prints)"
        )
    return found


def _run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [slurm_tool(args[0]), *args[1:]], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


# ---- the batch script ---------------------------------------------------------------------------------


def job_dir(run_config: dict) -> Path:
    return Path(run_config["output_dir"]) / "slurm"


def sbatch_options(run_config: dict, launch_cfg: dict) -> list[str]:
    s = launch_cfg.get("slurm") or {}
    d = job_dir(run_config)
    opts = [
        f"--job-name=perfbench-{run_config['run_id']}"[:120],
        f"--nodes={launch_cfg.get('nodes', 1)}",
        "--ntasks-per-node=1",
        f"--output={d}/job-%j.out",
        "--open-mode=append",
        # a run that lost a node fails as NODE_FAIL rather than starting again over its own files
        "--no-requeue",
    ]
    for key, flag in (
        ("partition", "--partition"),
        ("account", "--account"),
        ("time_limit", "--time"),
        ("cpus_per_task", "--cpus-per-task"),
    ):
        if s.get(key) is not None:
            opts.append(f"{flag}={s[key]}")
    return opts + list(s.get("sbatch_args") or [])


def write_job(run_config_path: Path, run_config: dict, launch_cfg: dict, env_extra: dict | None) -> Path:
    """The batch script and the spec its node tasks read; returns the script's path."""
    d = job_dir(run_config)
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("node*.json"):  # a resubmitted run: the earlier job's outcomes do not count
        old.unlink()
    spec = {"run_config": str(run_config_path), "launch": launch_cfg, "env_extra": env_extra or {}}
    (d / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True))
    nodes = int(launch_cfg.get("nodes", 1))
    node_cmd = [sys.executable, "-m", "perfbench.run.slurm", "node", str(d / "spec.json")]
    lines = [
        "#!/bin/bash",
        *[f"#SBATCH {o}" for o in sbatch_options(run_config, launch_cfg)],
        "# one task per node: msrun on each node starts that node's ranks (perfbench.run.slurm node)",
        f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"exec srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 {shlex.join(node_cmd)}",
        "",
    ]
    script = d / "job.sh"
    script.write_text("\n".join(lines))
    return script


def submit(script: Path) -> str:
    r = _run(["sbatch", "--parsable", str(script)], timeout=60)
    if r.returncode != 0:
        said = "; ".join(ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip())
        raise UserError(f"sbatch refused the job ({script}): {said[:500]}")
    return r.stdout.strip().split(";")[0]


# ---- following a job ----------------------------------------------------------------------------------

_KV = re.compile(r"(\w+)=(\S*)")


def job_info(job_id: str) -> JobInfo | None:
    """The job as Slurm sees it now: `scontrol show job` while slurmctld remembers it (MinJobAge), then
    `sacct` (clusters with accounting); None when neither knows the job."""
    try:
        r = _run(["scontrol", "show", "job", "-o", str(job_id)])
    except subprocess.TimeoutExpired:
        r = None
    if r is not None and r.returncode == 0 and "JobState=" in r.stdout:
        return parse_scontrol_job(r.stdout.splitlines()[0])
    if shutil.which("sacct"):
        try:
            a = _run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "JobID,State,ExitCode,Reason,NodeList"])
        except subprocess.TimeoutExpired:
            return None
        lines = [ln for ln in a.stdout.splitlines() if ln.strip()] if a.returncode == 0 else []
        if lines and lines[0].count("|") >= 4:
            return parse_sacct_job(lines[0])
    return None


def parse_scontrol_job(line: str) -> JobInfo:
    """One line of `scontrol show job -o` (KEY=VALUE pairs)."""
    kv = dict(_KV.findall(line))
    reason = kv.get("Reason")
    return JobInfo(
        kv.get("JobId", "?"),
        kv.get("JobState", "UNKNOWN"),
        None if reason in (None, "None") else reason,
        kv.get("ExitCode"),
        kv.get("NodeList"),
        "scontrol",
        kv,
    )


def parse_sacct_job(line: str) -> JobInfo:
    """One line of `sacct -n -P -X -o JobID,State,ExitCode,Reason,NodeList`; State may read "CANCELLED by 0"."""
    job_id, state, code, reason, nodelist = line.split("|")[:5]
    word = state.split()[0] if state else "UNKNOWN"
    detail = reason if reason and reason != "None" else (state if state != word else None)
    return JobInfo(job_id, word, detail, code, nodelist, "sacct", {"State": state})


def cancel(job_id: str, wait_s: float = 60, poll_s: float = 0.5) -> JobInfo | None:
    """scancel the job and wait (up to wait_s) until Slurm reports it ended."""
    try:
        _run(["scancel", str(job_id)])
    except subprocess.TimeoutExpired:
        pass
    deadline = time.time() + wait_s
    info = job_info(job_id)
    while info is not None and not info.final and time.time() < deadline:
        time.sleep(poll_s)
        info = job_info(job_id)
    return info


def describe(info: JobInfo | None, job_id: str) -> str:
    if info is None:
        return f"Slurm job {job_id}: Slurm no longer knows it (neither scontrol nor sacct)"
    why = f", reason {info.reason}" if info.reason else ""
    code = f", exit code {info.exit_code}" if info.exit_code and info.exit_code != "0:0" else ""
    return f"Slurm job {job_id} {MEANING.get(info.state, info.state.lower())} ({info.state}{why}{code})"


def launch_slurm(
    run_config_path: Path,
    run_config: dict,
    launch_cfg: dict,
    *,
    on_progress: Callable[[dict[int, int]], None] | None = None,
    on_state: Callable[[str], None] | None = None,
    on_submit: Callable[[str], None] | None = None,
    stop: Callable[[dict[int, int]], str | None] | None = None,
    env_extra: dict[str, str] | None = None,
    job_id: str | None = None,
    **_ignored,
) -> LaunchResult:
    """Run one configuration as a Slurm job (or follow `job_id`, submitted earlier) until it ends.
    `on_submit(job_id)` is called right after sbatch (store it to re-attach); `on_state(text)` whenever the
    job's state or reason changes; `on_progress`/`stop` as in launcher.launch."""
    out_dir = Path(run_config["output_dir"])
    metrics_dir = out_dir / "metrics"
    metrics_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    script = job_dir(run_config) / "job.sh"
    if job_id is None:
        script = write_job(run_config_path, run_config, launch_cfg, env_extra)
        job_id = submit(script)
        (job_dir(run_config) / "job_id").write_text(job_id + "\n")
        if on_submit:
            on_submit(job_id)
    poll_s = float((launch_cfg.get("slurm") or {}).get("poll_s", 2.0))
    timeout_s = float(launch_cfg.get("timeout_s", 900))
    t0 = time.time()
    result = LaunchResult(status="failed", command=["sbatch", "--parsable", str(script)])
    result.slurm = {"job_id": job_id, "script": str(script)}
    started: float | None = None
    seen_state, last_counts = None, {}
    info: JobInfo | None = None
    cancelled_for: str | None = None
    try:
        while True:
            info = job_info(job_id)
            if info is None:
                break
            if (info.state, info.reason) != seen_state:
                seen_state = (info.state, info.reason)
                if on_state:
                    on_state(f"Slurm job {job_id} {info.state}" + (f" ({info.reason})" if info.reason else ""))
            if info.state in ("RUNNING", "COMPLETING") and started is None:
                started = time.time()
            counts = count_steps(metrics_dir)
            if counts != last_counts:
                last_counts = counts
                if on_progress:
                    on_progress(counts)
                why = stop(counts) if stop and not info.final else None
                if why:
                    info = cancel(job_id)
                    result.status, result.reason = "stopped", why
                    break
            if info.final:
                break
            if started is not None and time.time() - started > timeout_s:
                cancelled_for = f"timed out after {timeout_s:.0f} s of running (launch.timeout_s)"
                info = cancel(job_id)
                break
            time.sleep(poll_s)
    except BaseException:  # Ctrl-C or SIGTERM of the sweep: the job must not run on without it
        cancel(job_id, wait_s=30)
        raise
    result.wall_s = time.time() - (started or t0)
    if info is None or info.final:
        # ranks a lost node's step left running where this machine is that node (the test cluster; a real
        # failed node takes them down with it); nothing of a finished job runs on a login node otherwise
        kill_stale(run_config["run_id"])
    result.slurm.update(
        {
            "state": info.state if info else "UNKNOWN",
            "reason": info.reason if info else None,
            "exit_code": info.exit_code if info else None,
            "nodelist": info.nodes if info else None,
            "nodes": node_outcomes(run_config),
        }
    )
    if result.status == "stopped":
        return result
    return _outcome(result, info, job_id, run_config, int(launch_cfg.get("nodes", 1)), cancelled_for)


def node_outcomes(run_config: dict) -> list[dict]:
    out = []
    for f in sorted(job_dir(run_config).glob("node*.json")):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda n: n.get("node_rank", 0))


def _outcome(
    result: LaunchResult,
    info: JobInfo | None,
    job_id: str,
    run_config: dict,
    nodes_expected: int,
    cancelled_for: str | None,
) -> LaunchResult:
    """ok, or failed with Slurm's state and reason plus the failing node's (or rank's) account and log tail."""
    nodes = result.slurm["nodes"]
    ws, steps = run_config["world_size"], run_config["train"]["steps"]
    metrics_dir = Path(run_config["output_dir"]) / "metrics"
    counts = count_steps(metrics_dir)
    node_failed = [n for n in nodes if n.get("status") != "ok"]
    # a workload script decides its own steps (one that recorded none is kept with the reason, as on one machine)
    script = run_config.get("workload") == "script"
    missing = [] if script else [r for r in range(ws) if counts.get(r, 0) < steps]
    if (
        info is not None
        and info.state == "COMPLETED"
        and not node_failed
        and not missing
        and len(nodes) == nodes_expected
    ):
        result.status, result.returncode = "ok", 0
        return result
    parts = [cancelled_for + f"; Slurm job {job_id} cancelled" if cancelled_for else describe(info, job_id)]
    # the node that failed on its own account (not the ones Slurm ended because of it) says which rank and why
    own = [n for n in node_failed if n.get("reason") and not n.get("ended_by_slurm")]
    first = min(own, key=lambda n: n.get("finished", 0)) if own else None
    # the rank whose script raised first, by the ranks' final metas, is the cause wherever it ran: its node may have
    # been ended by Slurm (--kill-on-bad-exit) before it wrote its own account, after a peer failed in a collective
    raised = first_raised(metrics_dir)
    at = [n for n in nodes if raised is not None and n.get("node_rank") == raised.get("node_rank")]
    if raised is not None and at and (first is None or first.get("failed_rank") != raised["rank"]):
        why, tail = raised_account(Path(run_config["output_dir"]) / "logs", metrics_dir, raised)
        first = {**at[0], "reason": why, "failed_rank": raised["rank"], "log_tail": tail}
    if first is not None:
        parts.append(f"node {first['node_rank']} ({first.get('host')}): {first['reason']}")
        result.failed_rank, result.log_tail = first.get("failed_rank"), first.get("log_tail", "")
    else:
        rank, tail = failing_rank(
            Path(run_config["output_dir"]) / "logs", counts, ws, msrun_log=f"../slurm/job-{job_id}.out"
        )
        result.failed_rank, result.log_tail = rank, tail
        if missing:
            parts.append(f"steps done per rank: {dict(sorted(counts.items()))} of {steps}")
        if rank is not None:
            parts.append(f"rank {rank} stopped first")
    result.reason = "; ".join(parts)
    code = (info.exit_code or "").split(":")[0] if info else ""
    result.returncode = int(code) if code.isdigit() else None
    return result


# ---- on each node, inside the job ----------------------------------------------------------------------


def first_node_address(nodelist: str) -> str:
    """msrun's master: the allocation's first node (`scontrol show hostnames`), as Slurm's NodeAddr
    (the host name on most clusters), resolved to an IP address."""
    r = _run(["scontrol", "show", "hostnames", nodelist])
    names = r.stdout.split()
    if r.returncode != 0 or not names:
        raise UserError(f"scontrol show hostnames {nodelist} failed: {r.stderr.strip()}")
    addr = names[0]
    n = _run(["scontrol", "show", "node", "-o", names[0]])
    if n.returncode == 0:
        addr = dict(_KV.findall(n.stdout)).get("NodeAddr") or addr
    try:
        return socket.gethostbyname(addr)
    except OSError:
        return addr


def job_master_port(job_id: str, launch_cfg: dict) -> int:
    """The same port on every node without talking: launch.master_port, or one derived from the job id."""
    port = launch_cfg.get("master_port", "auto")
    return int(port) if port != "auto" else 20000 + int(re.sub(r"\D", "", job_id) or 0) % 30000


def node_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    rc_path = Path(spec["run_config"])
    run_config = json.loads(rc_path.read_text())
    env = os.environ
    node_rank, nodes = int(env["SLURM_NODEID"]), int(env.get("SLURM_JOB_NUM_NODES") or env["SLURM_NNODES"])
    job_id = env["SLURM_JOB_ID"]
    launch_cfg = {
        **spec["launch"],
        "nodes": nodes,
        "node_rank": node_rank,
        "master_addr": first_node_address(env["SLURM_JOB_NODELIST"]),
        "master_port": job_master_port(job_id, spec["launch"]),
        # the sweep cancels the job on launch.timeout_s; this is the node's own backstop
        "timeout_s": float(spec["launch"].get("timeout_s", 900)) + 120,
    }
    out = {
        "node_rank": node_rank,
        "nodes": nodes,
        "host": socket.gethostname(),
        "slurm_node": env.get("SLURMD_NODENAME"),
        "job_id": job_id,
        "master_addr": launch_cfg["master_addr"],
        "master_port": launch_cfg["master_port"],
        "started": time.time(),
    }
    print(
        f"[perfbench] node {node_rank}/{nodes} ({out['slurm_node']}): msrun with master "
        f"{launch_cfg['master_addr']}:{launch_cfg['master_port']}",
        flush=True,
    )

    def ended(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, ended)  # scancel, time limit, --kill-on-bad-exit: end msrun and its ranks
    signal.signal(signal.SIGINT, ended)
    try:
        res = launch(
            rc_path,
            run_config,
            launch_cfg,
            env_extra={
                "PERFBENCH_SYNC_TAG": f"{run_config['run_id']}-job{job_id}",
                "PERFBENCH_NODE_RANK": str(node_rank),  # each rank's meta says its node (the job's account)
                **(spec.get("env_extra") or {}),
            },
        )
        out.update({k: v for k, v in asdict(res).items() if k != "slurm"})
    except KeyboardInterrupt as exc:
        out.update(
            {
                "status": "failed",
                "ended_by_slurm": True,
                "reason": f"node {node_rank} ended by Slurm ({exc.args[0] if exc.args else 'signal'})",
            }
        )
    out["finished"] = time.time()
    dest = job_dir(run_config) / f"node{node_rank}.json"
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps(out, indent=2, default=str))
    os.replace(tmp, dest)
    print(
        f"[perfbench] node {node_rank}: {out['status']}" + (f": {out.get('reason')}" if out.get("reason") else ""),
        flush=True,
    )
    return 0 if out["status"] == "ok" else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "node":
        sys.exit(node_main(sys.argv[2]))
    print(
        "usage: python -m perfbench.run.slurm node SPEC.json  (run by the job script perfbench writes)", file=sys.stderr
    )
    sys.exit(2)
