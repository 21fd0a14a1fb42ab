"""Why a launched run failed, in one line: the rank that died first (from msrun's "Worker process PID exit with
exception. Error code: C" line, torchrun's root-cause summary checked against the ranks' final metas, and the pids
seen while it ran), how (exit code or signal), the last step it finished, and the first error line of its log, e.g.
"rank 1 killed by SIGKILL after step 5"; with no evidence which rank it was, it says so rather than guess."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path


_WORKER_EXIT = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")
#: torchrun's summary of a failed run: "Root Cause (first observed failure): ... rank : R (local_rank: L)
#: exitcode : C (pid: P)"
#: every failure torchrun's summary lists ("rank      : 1 (local_rank: 1)"): the ranks of this torchrun's node
_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank", re.M)
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
        root = {"pid": int(t.group(3)), "code": code, "how": describe_exit(code), "rank": int(t.group(1))}
        named = (
            {int(r) for r in _TORCHRUN_RANK.findall(text[text.find("Failures:") :])} if "Failures:" in text else set()
        )
        return _first_raised(metrics_dir, root, named | {root["rank"]})
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


def _raised(metrics_dir: Path, ranks: set[int] | None) -> dict[int, tuple[int, dict]]:
    """{rank: (when its final meta was written, the meta)} of the ranks among `ranks` (every rank when None) whose
    script raised: such a rank writes its final meta (exit_status, error, pid) as it ends, its last write."""
    ended = {}
    for meta in metrics_dir.glob("rank*.meta.json"):
        try:
            d, when = json.loads(meta.read_text()), meta.stat().st_mtime_ns
        except (OSError, ValueError):
            continue
        if (
            isinstance(d, dict)
            and d.get("exit_status") not in (0, None)
            and isinstance(d.get("rank"), int)
            and (ranks is None or d["rank"] in ranks)
        ):
            ended[d["rank"]] = (when, d)
    return ended


def first_raised(metrics_dir: Path, ranks: set[int] | None = None) -> dict | None:
    """The final meta of the rank whose script raised first, among `ranks` (every rank when None): the meta with a
    nonzero exit status written earliest. None when no rank recorded one."""
    ended = _raised(metrics_dir, ranks)
    return ended[min(ended, key=lambda r: ended[r][0])][1] if ended else None


def _first_raised(metrics_dir: Path, root: dict, named: set[int]) -> dict:
    """torchrun's root cause is the failure with the smallest timestamp in whole seconds, the lowest rank on a tie:
    when rank 1 raises and rank 0 fails in its collective a moment later, torchrun can name rank 0. When torchrun's
    root is a rank that raised, the rank that raised first is the root. Only the ranks this torchrun's summary names
    (`named`) are candidates: on one node of several (Slurm) the metrics folder also holds other nodes' ranks, which
    that node's own account must not blame (the job's account does: run/slurm.py)."""
    ended = _raised(metrics_dir, named)
    if root["rank"] not in ended:  # killed, not raised: no final meta to compare
        return root
    d = ended[min(ended, key=lambda r: ended[r][0])][1]
    if d["rank"] == root["rank"]:
        return root
    code = int(d["exit_status"])
    return {"pid": d.get("pid"), "code": code, "how": describe_exit(code), "rank": d["rank"]}


def raised_account(log_dir: Path, metrics_dir: Path, meta: dict) -> tuple[str, str]:
    """(one-line reason, log tail) of a rank whose script raised, from its final meta and its own log."""
    rank = meta["rank"]
    f = log_dir / f"worker_{rank}.log"
    tail = _tail(f.read_text(errors="replace")) if f.exists() else ""
    error = meta.get("error")
    why = f": {error}" if error else _first_error(tail)
    return _rank_ended(rank, describe_exit(int(meta["exit_status"])), metrics_dir) + why, tail


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


def _rank_ended(rank: int, how: str, metrics_dir: Path) -> str:
    """'rank R <how it ended> after step S' (or 'before finishing a step'): the start of every dead rank's reason."""
    return f"rank {rank} {how} {_after_step(metrics_dir, rank)}"


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


def explain_failure(
    log_dir: Path,
    metrics_dir: Path,
    steps: dict[int, int],
    world_size: int,
    *,
    msrun_log: str,
    tool: str,
    returncode: int | None,
    reason: str | None,
    died: dict | None,
    script: bool,
) -> tuple[int | None, str, str]:
    """(failed rank, the tail of its log, the one-line reason) of a failed launch. `reason`: why perfbench ended it
    (timed out, hung), None when it ended by itself; `died`: the first worker msrun saw die (`dead_worker`), if
    that is a cause; `script`: a user's script (`workload: script`); `tool`: msrun or torchrun."""
    rank, tail = failing_rank(log_dir, steps, world_size, msrun_log)
    if died is not None and died["rank"] is not None:
        rank = died["rank"]
        f = log_dir / f"worker_{rank}.log"
        tail = _tail(f.read_text(errors="replace")) if f.exists() else tail
    if script and rank is None:  # no rank to blame (all stuck alike): every rank's last lines
        tail = _ranks_tails(log_dir, world_size) or tail
    if reason is None:
        if died is not None and died["rank"] is not None:
            reason = (
                _rank_ended(rank, died["how"], metrics_dir) + f" ({tool} exit code {returncode})" + _first_error(tail)
            )
        else:
            who = f"rank {rank}" if rank is not None else "msrun"
            reason = (
                f"{who} failed {_after_step(metrics_dir, rank)} ({tool} exit code {returncode})"
                if rank is not None
                else f"{tool} failed ({tool} exit code {returncode})"
            ) + _first_error(tail)
    elif died is not None and died["rank"] is not None:  # a rank had died, and its launcher had not ended the run
        reason = _rank_ended(rank, died["how"], metrics_dir) + f" ({tool} log), then {reason}" + _first_error(tail)
    elif rank is not None:
        reason += f"; rank {rank} stopped first" + _first_error(tail)
    if script and not any(
        (log_dir / f"worker_{r}.log").exists() and (log_dir / f"worker_{r}.log").stat().st_size
        for r in range(world_size)
    ):
        reason += "; the script printed nothing (every rank's log is empty)"
    return rank, tail, reason
