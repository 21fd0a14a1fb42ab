"""One rank's step recorder: step boundaries in, the contract's records out (perfbench.capture.writer).

Whoever sees a step boundary calls `begin()` and `end()`: the MindSpore callback (perfbench.capture.mindspore),
PyTorch's optimizer step hooks (perfbench.capture.torch_hooks), or the user's own `with capture.step(): ...`.
The profiler window (a framework-specific object with `start() / step() / stop()`) is advanced after each step,
outside its time, as the reference runner does. Standard library only.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import sys
import time
from typing import Any

from perfbench.capture import writer

#: the resident memory is sampled after a step when the last sample is at least this old; a step ending sooner
#: carries the last sample (two system calls of ~2-20 us each here, ~25-35 us together inside a loaded training
#: loop: at most 20 a second whatever the step time; steps of 50 ms or more are each sampled)
MEMORY_EVERY_S = 0.05

_time, _process_time = time.time, time.process_time

CONFIG_VAR = "PERFBENCH_RUN_CONFIG"  # path of the run's run_config.json (set by the launcher)
SETTINGS_VAR = "PERFBENCH_SETTINGS"  # the run's settings as JSON (docs/workloads.md, "Your own job")


def env_rank() -> int:
    """This process's rank from the launcher's environment (torchrun: RANK; msrun: RANK_ID / MS_NODE_ID)."""
    for var in ("RANK", "RANK_ID", "MS_NODE_ID"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return 0


class Recorder:
    """Writes `metrics/rank{R}.steps.jsonl` and `.meta.json` under the run's output folder."""

    def __init__(self, config: dict, rank: int | None = None):
        self.config = config
        self.rank = env_rank() if rank is None else rank
        self.world_size = int(config.get("world_size") or 1)
        self.out = pathlib.Path(config["output_dir"])
        self.metrics_dir = self.out / "metrics"
        train = config.get("train") or {}
        self.warmup = int(train.get("warmup_steps") or 0)
        self.default_samples = train.get("batch_size")
        self.sample_memory = os.environ.get("PERFBENCH_SAMPLE_MEMORY", "1") != "0"
        self.step = 0
        self.open = False
        self.mode: str | None = None  # who found the steps: "mindspore-callback" | "optimizer-hook" | "manual"
        self.samples_source: str | None = None
        self.window = None  # the profiler window (start/step/stop), made by the framework's hook on first use
        self.window_steps: list[int] | None = None
        self.last_end: float | None = None
        self.peak_rss: int | None = None
        self._start = 0.0
        self._cpu0 = 0.0
        # the process's CPU time (time.process_time()) at the last step's end when nothing but its record was done
        # since (no memory sample, no profiler step): a step begun right after it may start its CPU time there
        self.last_cpu: float | None = None
        self._log: writer.StepLog | None = None
        self._memory = writer.MemorySampler()
        self._mem: dict | None = None  # the last memory sample and when it was taken (time.time())
        self._mem_ts = float("-inf")
        self.meta: dict = {
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            # the node of a multi-node Slurm job (run/slurm.py sets it), None elsewhere
            "node_rank": int(os.environ["PERFBENCH_NODE_RANK"])
            if os.environ.get("PERFBENCH_NODE_RANK", "").isdigit()
            else None,
            "run_id": config.get("run_id"),
            "workload": config.get("workload"),
            "threads_per_rank": config.get("threads_per_rank"),
            "warmup_steps": self.warmup,
            "machine_memory_bytes": writer.machine_memory_bytes(),
            "memory_sampling": self.sample_memory,
            "baseline_rss_bytes": writer.memory_sample()["rss_bytes"],
            "profiled_steps": None,
            "profile_level": "off",
            "clock": {
                "steps": "time.time() seconds (Unix epoch)",
                "profiler_ts": "trace ts is Unix epoch microseconds (same clock as time.time())",
                "profiler_ts_offset_us": 0.0,
            },
        }
        try:
            self.meta["affinity"] = sorted(os.sched_getaffinity(0))
            self.meta["threads"] = len(self.meta["affinity"])
        except (AttributeError, OSError):
            pass

    # -- the profiler window ---------------------------------------------------------------------
    def profile_window(self) -> tuple[int, str] | None:
        """(steps, level) of the profiled window after warm-up, or None when profiling is off."""
        prof = self.config.get("profile") or {}
        if not prof.get("enabled") or str(prof.get("level") or "default") == "off":
            return None
        n = int(prof.get("steps") or 0)
        return (n, str(prof.get("level") or "default")) if n > 0 else None

    def set_window(self, window, level: str, steps: int) -> None:
        self.window = window
        self.window_steps = [self.warmup, self.warmup + steps - 1]
        self.meta.update(profiled_steps=self.window_steps, profile_level=level)

    def open_window(self, make) -> None:
        """Start the run's profiler window before the first step, once per process: `make(steps, level)` builds
        the framework's window (ms_capture.MsWindow, torch_capture.TorchWindow)."""
        win = self.profile_window()
        if win is None or self.window is not None or self.step > 0:
            return
        steps, level = win
        w = make(steps, level)
        self.set_window(w, level, steps)
        w.start()

    # -- steps -------------------------------------------------------------------------------------
    def begin(self, start: float | None = None, cpu: float | None = None) -> None:
        """A step starts: now, or at `start` (time.time()) with the process's CPU time `cpu` (time.process_time())."""
        if self.open:
            return
        self.open = True
        self._start = _time() if start is None else start
        self._cpu0 = _process_time() if cpu is None else cpu

    def end(self, samples: int | None = None, loss: float | None = None, **extra) -> None:
        """The step ends now: its record is kept for the writer's thread, which makes the JSON line (StepLog). The
        training thread only reads the two clocks, samples memory when the last sample is `MEMORY_EVERY_S` old, and
        keeps a tuple (docs/benchmarks.md, "What capturing a user's script costs")."""
        if not self.open:
            self.begin(self.last_end)
        end = _time()
        self.last_cpu = cpu = _process_time()
        self.open = False
        mem = None
        if self.sample_memory:
            if end - self._mem_ts >= MEMORY_EVERY_S or self._mem is None:
                self._mem = mem = self._memory.sample()
                self._mem_ts = end
                self.peak_rss = max(self.peak_rss or 0, mem["max_rss_bytes"] or 0, mem["rss_bytes"] or 0) or None
                self.last_cpu = None  # its system calls' CPU time is no step's
            else:
                mem = self._mem
        step = self.step
        if samples is None and self.default_samples is not None:
            samples = int(self.default_samples)
            self.samples_source = self.samples_source or "setting train.batch_size"
        ws = self.window_steps
        in_window = ws is not None and ws[0] <= step <= ws[1]
        capture_s = None
        if self.window is not None:  # outside the step's time, as the reference runner does
            t0 = time.perf_counter()
            self.window.step()
            capture_s = time.perf_counter() - t0
            self.last_cpu = None
        log = self._log
        if log is None:
            log = self._log = writer.StepLog(self.metrics_dir / f"rank{self.rank}.steps.jsonl", writer.FLUSH_S)
        # kept, then encoded and written in batches at most writer.FLUSH_S apart (the first step's at once, with the
        # meta): a JSON line and a write per step cost ~15-80 us here, a few % of a 2 ms step (docs/benchmarks.md)
        log.append(
            (self.rank, step, self._start, end, samples, loss, in_window, cpu - self._cpu0, mem, capture_s, extra)
        )
        self.step = step + 1
        self.last_end = end
        if step == 0:
            self.write_meta()

    def flush(self) -> None:
        """Write the step records kept so far (before a deliberate crash or hang, say)."""
        if self._log is not None:
            self._log.flush()

    # -- meta --------------------------------------------------------------------------------------
    def set_meta(self, **kv) -> None:
        self.meta.update(kv)

    def write_meta(self) -> None:
        self.flush()  # the steps file holds at least the steps the meta counts
        self.meta.update(
            capture=self.mode,
            samples_source=self.samples_source,
            recorded_steps=self.step,
            peak_rss_bytes=self.peak_rss,
        )
        writer.write_meta(self.metrics_dir, self.rank, self.meta)

    def finish(self, exit_status: int | None, error: str | None = None) -> None:
        """The final meta: `finished: true` only for a script that ended normally (its last write)."""
        if self.window is not None:
            try:
                self.window.stop()
            except Exception as exc:  # noqa: BLE001 - the profiler's failure must not hide the run's data
                print(f"[perfbench] profiler stop failed: {exc}", file=sys.stderr, flush=True)
            self.window = None
        if self.step == 0:
            self.meta["no_steps_reason"] = (
                "no step boundary was seen: the script called neither mindspore Model.train nor a "
                "torch.optim optimizer's step(); mark its steps with `with perfbench.capture.step(): ...`"
            )
        self.meta.update(exit_status=exit_status, error=error, finished=exit_status == 0)
        self.write_meta()
        if self._log is not None:
            self._log.close()
            self._log = None
        self._memory.close()


_RECORDER: Recorder | None = None
_LOADED = False


def current() -> Recorder | None:
    """The process's recorder: under `perfbench sweep` (PERFBENCH_RUN_CONFIG set) one is made on first use; a script
    run on its own has none, and every capture call is then a no-op."""
    global _RECORDER, _LOADED
    if not _LOADED:
        _LOADED = True
        path = os.environ.get(CONFIG_VAR)
        if path and os.environ.get("MS_ROLE") != "MS_SCHED":
            _RECORDER = Recorder(json.loads(pathlib.Path(path).read_text()))
    return _RECORDER


def settings() -> dict:
    """The run's settings as perfbench handed them to the script ({} outside perfbench): `world_size`, `train`,
    `parallel`, `knobs`, `profile`, `run_id`, `output_dir`."""
    raw = os.environ.get(SETTINGS_VAR)
    return json.loads(raw) if raw else {}


def schedule_args(warmup: int, active: int) -> dict:
    """The framework profiler's schedule (MindSpore's and PyTorch's take the same keys) that records steps
    [warmup, warmup + active) when `step()` is called after every step, counting from step 0."""
    if warmup >= 1:
        return {"wait": warmup - 1, "warmup": 1, "active": active, "repeat": 1}
    return {"wait": 0, "warmup": 0, "active": active, "repeat": 1}


class ProfilerWindow:
    """The recorder's window interface over a framework profiler object `prof` (start / step / stop)."""

    prof: Any

    def start(self) -> None:
        self.prof.start()

    def step(self) -> None:
        self.prof.step()

    def stop(self) -> None:
        self.prof.stop()
