"""The per-rank record files every capture path writes (docs/architecture.md, "Contract: launcher -> workload"):
`metrics/rank{R}.steps.jsonl` (one JSON object per finished step, appended in batches at most `FLUSH_S` apart,
see `StepLog`) and `metrics/rank{R}.meta.json` (rewritten whole, atomically). The reference runner
(workloads/runner.py) and `perfbench.capture` write through these functions.

Standard library only: a user's script imports this without pandas or a framework.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import pathlib
import threading
import weakref

#: keys every step record has (the reference runner's and perfbench.capture's alike)
STEP_KEYS = ("rank", "step", "start_ts", "end_ts", "step_time_s", "samples", "loss", "profiled")
#: keys every step record has beside STEP_KEYS: cpu_s, and (with memory sampling on) the two memory samples
STEP_EXTRA_KEYS = ("cpu_s", "max_rss_bytes", "rss_bytes")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_sample() -> dict:
    """This process's memory now, cheaply (~10 us: one getrusage and one small /proc read; docs/benchmarks.md):
    `max_rss_bytes` = the OS's high-water mark of the resident set since the process started (ru_maxrss, KiB on
    Linux), which catches peaks inside a step; `rss_bytes` = the resident set right now (/proc/self/statm).
    A value the OS does not give is None (unknown, not 0)."""
    import resource

    out: dict = {"max_rss_bytes": None, "rss_bytes": None}
    try:
        out["max_rss_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024 or None
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/self/statm", "rb") as fh:
            out["rss_bytes"] = int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        pass
    return out


_FORKS = 0  # forks this process came out of (os.register_at_fork): a forked child's /proc/self fds are its parent's


def _forked() -> None:
    global _FORKS
    _FORKS += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class MemorySampler:
    """`memory_sample()` for every step in two system calls (getrusage, one pread of /proc/self/statm, which stays
    open; reopened in a forked child) instead of five (open, read, close); the same two values, with the same keys."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._forks = -1
        import resource

        self._getrusage = resource.getrusage
        self._self = resource.RUSAGE_SELF

    def sample(self) -> dict:
        out: dict = {"max_rss_bytes": None, "rss_bytes": None}
        try:
            out["max_rss_bytes"] = int(self._getrusage(self._self).ru_maxrss) * 1024 or None
        except (OSError, ValueError):
            pass
        try:
            if self._forks != _FORKS:  # first use, or a forked child: /proc/self is resolved at open
                self._fd, self._forks = os.open("/proc/self/statm", os.O_RDONLY), _FORKS
            out["rss_bytes"] = int(os.pread(self._fd, 128, 0).split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass
        return out

    def close(self) -> None:
        if self._fd is not None and self._forks == _FORKS:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd, self._forks = None, -1


def machine_memory_bytes() -> int | None:
    """The machine's total memory (MemTotal of /proc/meminfo), or None where it cannot be read."""
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


#: the longest a finished step's record waits in memory before it is in the file (what the launcher's progress,
#: stall detection and tune's live pruning read while the run is live)
FLUSH_S = 0.5

_OPEN_LOGS: weakref.WeakSet = weakref.WeakSet()


class StepLog:
    """A rank's `rank{R}.steps.jsonl`, written in batches: `append()` only keeps the record (~1 us); the records are
    encoded (one JSON line each) and written in one `os.write` (O_APPEND) when asked (`flush()`: the first step, the
    meta, the end of the run), from a daemon thread at most `flush_s` after they were appended (its encoding runs
    while the training thread is inside the framework's compute, which releases the GIL), and at the interpreter's
    exit. A process that ends normally or by an exception leaves every line; a process killed (SIGKILL, os._exit, a
    segfault) loses the lines of its last `flush_s` at most; nothing is fsynced (an fsync cost 0.1-5 ms per step
    here), so only a machine crash can lose lines the file had. A record must not change after `append()`."""

    def __init__(self, path: pathlib.Path, flush_s: float | None = None):
        self.path = path
        self.flush_s = FLUSH_S if flush_s is None else flush_s
        self._pending: collections.deque = collections.deque()  # appends and pops are thread-safe
        self._write_lock = threading.Lock()  # one batch at a time: lines stay in order
        self._fd: int | None = None
        self._unwritten = b""
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        _OPEN_LOGS.add(self)

    def append(self, rec: dict | tuple) -> None:
        """Keep one step record for the next flush: a dict, or the values `step_line` takes (a tuple, the recorder's:
        the training thread builds no dict)."""
        self._pending.append(rec)
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="perfbench-steplog", daemon=True)
            self._thread.start()

    def flush(self) -> None:
        """Write the kept lines now (a forked child never writes its parent's lines)."""
        if os.getpid() != self._pid:
            self._pending.clear()
            return
        with self._write_lock:
            pending = self._pending
            batch = [pending.popleft() for _ in range(len(pending))]  # what the training thread adds meanwhile stays
            # ASCII (json.dumps escapes the rest); after a failed write, what it left comes first
            data = self._unwritten + "".join([step_line(*r) if type(r) is tuple else _line(r) for r in batch]).encode()
            self._unwritten = b""
            try:
                if data and self._fd is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                while data:
                    data = data[os.write(self._fd, data) :]
            except OSError:
                self._unwritten = data  # kept for the next flush
                raise

    def close(self) -> None:
        """Flush, stop the thread, close the file (the run's end)."""
        self._stop.set()
        self.flush()
        if self._fd is not None and os.getpid() == self._pid:
            os.close(self._fd)
        self._fd = None
        _OPEN_LOGS.discard(self)

    def _run(self) -> None:
        while not self._stop.wait(self.flush_s):
            if self._pending or self._unwritten:
                try:
                    self.flush()
                except OSError:  # a full disk: the lines stay for the next try; the run goes on
                    pass


def _plain(value):
    """A value json cannot write as it is: a framework's scalar or array as its Python number or list (numpy's and
    torch's `tolist()`), anything else as its text."""
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


_ENCODER = json.JSONEncoder(default=_plain)  # one encoder for every line (json.dumps with `default` makes one a call)


def _line(rec: dict) -> str:
    """A record's JSON line, as `json.dumps(rec, default=_plain)` writes it."""
    return _ENCODER.encode(rec) + "\n"


@atexit.register
def _flush_open_logs() -> None:
    for log in list(_OPEN_LOGS):
        try:
            log.flush()
        except OSError:
            pass


def write_meta(metrics_dir: pathlib.Path, rank: int, meta: dict) -> None:
    """`rank{R}.meta.json`, replaced atomically (a reader never sees half a file)."""
    metrics_dir.mkdir(parents=True, exist_ok=True)
    path = metrics_dir / f"rank{rank}.meta.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=1, default=str))
    os.replace(tmp, path)


def meta_finished(metrics_dir: pathlib.Path, rank: int) -> bool:
    """Whether rank `rank`'s meta says `finished: true` (its last write, Recorder.finish); False when the file is
    missing or half-read."""
    try:
        return bool(json.loads((metrics_dir / f"rank{rank}.meta.json").read_text()).get("finished"))
    except (OSError, ValueError):
        return False


def step_record(
    rank: int,
    step: int,
    start: float,
    end: float,
    samples: int | None,
    loss: float | None,
    profiled: bool,
    cpu_s: float | None,
    mem: dict | None,
) -> dict:
    """A step record in the contract's key order (extra keys are added by the caller)."""
    rec = {
        "rank": rank,
        "step": step,
        "start_ts": start,
        "end_ts": end,
        "step_time_s": end - start,
        "samples": samples,
        "loss": loss,
        "profiled": profiled,
        "cpu_s": cpu_s,
    }
    if mem is not None:
        rec.update(mem)
    return rec


_MEM_KEYS = ("max_rss_bytes", "rss_bytes")  # a memory sample's keys, in its order
_LINE = (
    '{{"rank": {}, "step": {}, "start_ts": {!r}, "end_ts": {!r}, "step_time_s": {!r}, "samples": {}, "loss": {}, '
    '"profiled": {}, "cpu_s": {!r}'
).format


def step_line(
    rank: int,
    step: int,
    start: float,
    end: float,
    samples: int | None,
    loss: float | None,
    profiled: bool,
    cpu_s: float,
    mem: dict | None,
    capture_s: float | None = None,
    extra: dict | None = None,
) -> str:
    """The JSON line of `step_record(...)` (+ `capture_s` when not None, + `extra`): the writer's thread makes it
    from the values the recorder kept. The same text `json.dumps` writes (tests/unit/test_capture_batched_writes.py);
    formatted directly (~4 us here against ~6 us through the json encoder, floats' repr being most of either) when
    every value is a plain int, finite float or None and nothing is extra, else through the encoder."""
    if (
        not extra
        and capture_s is None
        and (samples is None or type(samples) is int)
        and (loss is None or (type(loss) is float and loss - loss == 0.0))  # finite: NaN and inf go to the encoder
        and type(start) is float
        and type(end) is float
        and type(cpu_s) is float
        and start - start == 0.0
        and end - end == 0.0
        and cpu_s - cpu_s == 0.0
        and type(step) is int
        and type(rank) is int
        and type(profiled) is bool
    ):
        head = _LINE(
            rank,
            step,
            start,
            end,
            end - start,
            "null" if samples is None else samples,
            "null" if loss is None else repr(loss),
            "true" if profiled else "false",
            cpu_s,
        )
        if mem is None:
            return head + "}\n"
        hi, now = mem.get("max_rss_bytes"), mem.get("rss_bytes")
        if tuple(mem) == _MEM_KEYS and (hi is None or type(hi) is int) and (now is None or type(now) is int):
            hi_s, now_s = "null" if hi is None else hi, "null" if now is None else now
            return f'{head}, "max_rss_bytes": {hi_s}, "rss_bytes": {now_s}}}\n'
    rec = step_record(rank, step, start, end, samples, loss, profiled, cpu_s, mem)
    if capture_s is not None:
        rec["capture_s"] = capture_s
    if extra:
        rec.update(extra)
    return _line(rec)
