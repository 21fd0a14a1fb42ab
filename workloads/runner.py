"""The shared training loop every workload runs under msrun (contract: docs/architecture.md).

    entry.py --config run_config.json  ->  runner.main()  ->  workloads.<name>.build(ctx).train_step(step)

The runner owns everything around a step: MindSpore set-up, ``init()``, seeding, the ``inject`` failure hooks,
``metrics/rank{R}.spans.jsonl`` and the rank-0 SummaryRecord. Step timing, ``metrics/rank{R}.steps.jsonl`` /
``.meta.json`` and the profiler window go through ``perfbench.capture``'s recorder, the one a user's script is
captured by (one capture path).  A workload only builds its model in
``build(ctx)`` and returns an object with ``train_step(step) -> dict(loss=float, samples=int, ...)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pathlib
import socket
import sys
import time

from perfbench.capture.ms_capture import PROFILE_LEVELS, MsWindow
from perfbench.capture.writer import (
    STEP_KEYS,
    machine_memory_bytes,
    memory_sample,
    meta_finished,
)
from perfbench.errors import ConfigError, UserError
from perfbench.startup import PIN_VAR, process_started
from workloads.pinning import set_process_affinity, widened_for_join
from perfbench.capture.recorder import Recorder

__all__ = ["PROFILE_LEVELS", "STEP_KEYS", "memory_sample"]


def _cpu_threads() -> int:
    """CPUs this process may run on (what taskset / msrun --bind_core leave us)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _os_threads() -> int | None:
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def framework_peak_bytes(ms) -> int | None:
    """MindSpore's own allocator peak (`ms.runtime.max_memory_allocated()`); on the CPU backend it returns 0,
    which means unknown (docs/concepts.md), so 0 and errors are None."""
    try:
        v = int(ms.runtime.max_memory_allocated())
    except Exception:  # noqa: BLE001 - an API a backend lacks is unknown, not a failure of the run
        return None
    return v if v > 0 else None


def load_config(path: str | os.PathLike) -> dict:
    p = pathlib.Path(path)
    try:
        cfg = json.loads(p.read_text())
    except FileNotFoundError:
        raise UserError(f"{p}: run config not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"{p}: run config must be a JSON object")
    for key in ("run_id", "workload", "world_size", "output_dir", "model", "train", "profile", "parallel", "inject"):
        if key not in cfg:
            raise ConfigError(f"{p}: run config is missing key '{key}'")
    for key in ("steps", "warmup_steps", "seed", "mode"):
        if key not in cfg["train"]:
            raise ConfigError(f"{p}: run config is missing key 'train.{key}'")
    if cfg["train"]["mode"] not in ("graph", "pynative"):
        raise ConfigError(f"{p}: train.mode must be 'graph' or 'pynative', got {cfg['train']['mode']!r}")
    return cfg


class RunContext:
    """Built by the runner and handed to the workload's ``build(ctx)``."""

    def __init__(self, config: dict, rank: int, world_size: int, output_dir: pathlib.Path):
        self.config = config
        self.rank = rank
        self.world_size = world_size
        self.output_dir = pathlib.Path(output_dir)
        self.metrics_dir = self.output_dir / "metrics"
        self.metrics_dir.mkdir(parents=True, exist_ok=True)
        self.step = -1
        # steps and meta: perfbench.capture's recorder, the same as a user's script's (one capture path)
        self.recorder = Recorder({**config, "output_dir": str(self.output_dir), "world_size": world_size}, rank)
        self.recorder.mode = "runner"
        self._comm_bytes = 0
        self._collectives = 0
        self._counted = False
        self._spans = open(self.metrics_dir / f"rank{rank}.spans.jsonl", "a", buffering=1)

    # -- used by workloads -------------------------------------------------------------
    @contextlib.contextmanager
    def span(self, kind: str, mb: int | None = None, stage: int | None = None):
        """Time a host-side region of the current step; appended to spans.jsonl when it ends."""
        start = time.time()
        try:
            yield
        finally:
            self.add_span(kind, start, time.time(), mb, stage)

    def add_span(self, kind: str, start: float, end: float, mb: int | None = None, stage: int | None = None) -> None:
        """A span timed by the workload itself (time.time() seconds), e.g. from an asynchronous handle."""
        rec = {
            "rank": self.rank,
            "step": self.step,
            "kind": kind,
            "mb": mb,
            "stage": stage,
            "start_ts": start,
            "end_ts": end,
        }
        self._spans.write(json.dumps(rec) + "\n")
        self._spans.flush()

    def set_meta(self, **kv) -> None:
        """Merged into metrics/rank{R}.meta.json (written after step 0 and at the end)."""
        self.recorder.set_meta(**kv)

    def count_collective(self, nbytes: int, n: int | None = 1) -> None:
        """Add bytes this rank sent into collectives (and how many ops) to the current step.

        ``n=None`` means the op count is not known on the host (e.g. MindSpore fused the ops itself);
        the step's ``collectives`` is then written as null.
        """
        self._comm_bytes += int(nbytes)
        if n is None or self._collectives is None:
            self._collectives = None
        else:
            self._collectives += int(n)
        self._counted = True

    def barrier(self, name: str, timeout_s: float = 900.0) -> float:
        """Wait until every rank reached this point (files under ``output_dir/.sync``); returns seconds waited.

        Used after graph compilation: MindSpore's CPU collectives give up after ~30 s ("Ring ReduceScatter
        wait receiving failed"), and on a loaded machine one rank can finish compiling much later than another.
        Host-side files need no collective; all ranks of a run share ``output_dir`` (one node, or a folder
        shared by the nodes). PERFBENCH_SYNC_TAG is the same on every node of one attempt of the run.
        """
        if self.world_size <= 1:
            return 0.0
        tag = (
            os.environ.get("PERFBENCH_SYNC_TAG")
            or os.environ.get("PERFBENCH_RUN_TAG")
            or os.environ.get("MS_SCHED_PORT")
            or "run"
        )
        sync = self.output_dir / ".sync"
        sync.mkdir(parents=True, exist_ok=True)
        (sync / f"{tag}.{name}.rank{self.rank}").write_text(str(time.time()))
        t0 = time.time()
        while True:
            have = sum(1 for r in range(self.world_size) if (sync / f"{tag}.{name}.rank{r}").exists())
            if have == self.world_size:
                return time.time() - t0
            if time.time() - t0 > timeout_s:
                raise UserError(
                    f"rank {self.rank}: only {have} of {self.world_size} ranks reached '{name}' "
                    f"within {timeout_s:.0f} s"
                )
            time.sleep(0.1)

    # -- used by the runner --------------------------------------------------------------
    def _begin_step(self, step: int) -> None:
        self.step = step
        self._comm_bytes = 0
        self._collectives = 0
        self._counted = False

    def _comm_counted(self) -> dict:
        """The step's comm_bytes and collectives, when the workload counted any."""
        return {"comm_bytes": self._comm_bytes, "collectives": self._collectives} if self._counted else {}

    def write_meta(self) -> None:
        self.recorder.write_meta()

    def close(self) -> None:
        self.recorder.flush()  # the steps kept in memory (an injected crash exits right after)
        try:
            self._spans.close()
        except OSError:
            pass


class _Summary:
    """Rank-0 MindSpore SummaryRecord (loss, step time, throughput) under output_dir/summary/.

    Values are kept in memory during training and written when the run ends: SummaryRecord starts a
    writer process that competes for rank 0's core and skews the very step times being measured.
    """

    def __init__(self, ms, directory: pathlib.Path):
        self._ms = ms
        self._dir = directory
        self._rows: list[tuple[int, float, float, float]] = []

    def record(self, step: int, loss: float, step_time_s: float, throughput: float) -> None:
        self._rows.append((step, float(loss), float(step_time_s), float(throughput)))

    def close(self) -> None:
        if not self._rows:
            return
        from mindspore.train.summary import SummaryRecord

        self._dir.mkdir(parents=True, exist_ok=True)
        T, dt = self._ms.Tensor, self._ms.float32
        with SummaryRecord(str(self._dir), network=None) as rec:
            for step, loss, step_time_s, throughput in self._rows:
                rec.add_value("scalar", "loss", T(loss, dt))
                rec.add_value("scalar", "step_time_s", T(step_time_s, dt))
                rec.add_value("scalar", "throughput", T(throughput, dt))
                rec.record(step)
        self._rows = []


def _inject(cfg: dict, rank: int, step: int, ctx: RunContext) -> None:
    inj = cfg.get("inject") or {}
    if _at(inj, "crash", rank, step):
        print(f"[perfbench] inject: rank {rank} crashing at step {step} (exit 3)", file=sys.stderr, flush=True)
        ctx.close()
        os._exit(3)
    if _at(inj, "hang", rank, step):
        print(f"[perfbench] inject: rank {rank} hanging at step {step}", file=sys.stderr, flush=True)
        ctx.recorder.flush()  # the steps before it are in the file (the launcher's stall report counts them)
        while True:
            time.sleep(3600)


def _at(inj: dict, what: str, rank: int, step: int) -> bool:
    """inject.<what>_rank is this rank and inject.<what>_step this step (`what`: crash, hang)."""
    r, s = inj.get(f"{what}_rank"), inj.get(f"{what}_step")
    return r is not None and int(r) == rank and s is not None and int(s) == step


class _Slowdown:
    """inject's slowdowns of every step: delay_ms (every rank sleeps), busy_ms (every rank burns CPU),
    straggler_busy_ms (straggler_rank alone burns CPU), input_delay_ms (every rank waits for its batch)."""

    def __init__(self, inj: dict, rank: int):
        self.delay_s = float(inj.get("delay_ms") or 0) / 1000.0
        self.busy_s = float(inj.get("busy_ms") or 0) / 1000.0
        self.straggler_s = (
            float(inj.get("straggler_busy_ms") or 0) / 1000.0 if inj.get("straggler_rank") == rank else 0.0
        )
        self.input_delay_s = float(inj.get("input_delay_ms") or 0) / 1000.0

    def apply(self) -> float | None:
        """Slow this step down; the wall time waited for the batch (input_wait_s), None without input_delay_ms."""
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.busy_s:
            _burn_cpu(self.busy_s)
        if self.straggler_s:
            _burn_cpu(self.straggler_s)
        return _wait_for_batch(self.input_delay_s) if self.input_delay_s else None


def _burn_cpu(seconds: float) -> None:
    """inject.busy_ms: spin until this thread used `seconds` of CPU time (wall time stretches under load)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


def _wait_for_batch(seconds: float) -> float:
    """inject.input_delay_ms: the rank waits (idle, no CPU) for its next batch, as behind a slow input pipeline;
    returns the wall time waited."""
    t0 = time.perf_counter()
    time.sleep(seconds)
    return time.perf_counter() - t0


class Checkpoints:
    """train.checkpoint_every: after every N-th step, a synchronous ``ms.save_checkpoint`` of the workload's
    ``checkpoint_cell()`` (weights and optimizer state) to ``checkpoints/rank{R}-step{S}.ckpt`` (written to a
    temporary name and renamed, so a file with that name is complete). A resumed run (run config
    ``resume: {"step": K}``, set by `perfbench sweep --resume`) loads ``rank{R}-step{K-1}.ckpt`` and continues at
    step K; the data of a step depends only on (seed, rank, step), so the loss continues too."""

    def __init__(self, ms, wl, cfg: dict, rank: int, out: pathlib.Path):
        self.ms, self.rank, self.dir = ms, rank, out / "checkpoints"
        self.every = int(cfg["train"].get("checkpoint_every") or 0)
        self.steps = int(cfg["train"]["steps"])
        self.resume_step = int((cfg.get("resume") or {}).get("step") or 0)
        self.cell = None
        if self.every or self.resume_step:
            get = getattr(wl, "checkpoint_cell", None)
            if get is None:
                raise ConfigError(
                    f"train.checkpoint_every: workload {cfg['workload']!r} with this parallel layout "
                    "does not support checkpoints (use checkpoint_every: 0)"
                )
            self.cell = get()

    def path(self, step: int) -> pathlib.Path:
        return self.dir / f"rank{self.rank}-step{step}.ckpt"

    def restore(self) -> int:
        if not self.resume_step:
            return 0
        f = self.path(self.resume_step - 1)
        if not f.exists():
            raise UserError(f"rank {self.rank}: cannot resume at step {self.resume_step}: {f} is missing")
        self.ms.load_param_into_net(self.cell, self.ms.load_checkpoint(str(f)))
        print(f"[perfbench] rank {self.rank} resumed from {f.name}", file=sys.stderr, flush=True)
        return self.resume_step

    def maybe_save(self, step: int) -> float | None:
        if not self.every or (step + 1) % self.every or step + 1 >= self.steps:
            return None
        t0 = time.time()
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".rank{self.rank}-step{step}.tmp.ckpt"
        self.ms.save_checkpoint(self.cell, str(tmp))
        os.replace(tmp, self.path(step))
        return time.time() - t0


def run(cfg: dict, entry_ts: float | None = None) -> int:
    """One rank: MindSpore set up and the cluster joined, the workload built, its steps trained and recorded (with
    the profiler window, the injected failures and slowdowns, checkpoints), its final meta written. The scheduler
    msrun starts runs this too and serves the cluster inside init() instead."""
    startup = {"process": process_started(), "entry": entry_ts}  # the start-up timeline (perfbench/startup.py)
    ms, ms_threads = _start_mindspore(cfg["train"], cfg.get("threads_per_rank"))
    startup["imported"] = time.time()
    world_size = int(cfg["world_size"])
    rank = _join_cluster(cfg, world_size, startup)
    # Same seed on every rank: identical initial weights. Workloads derive per-rank data seeds.
    ms.set_seed(int(cfg["train"]["seed"]))

    out = pathlib.Path(cfg["output_dir"])
    ctx = RunContext(cfg, rank, world_size, out)
    _describe_rank(ctx, ms, ms_threads)
    wl = _build_workload(cfg, ctx)
    startup["built"] = time.time()
    ctx.set_meta(startup=startup)

    cap, level, prof_steps = _profile_window(cfg, ctx, out)
    rec = ctx.recorder
    rec.sample_memory = sample_memory = os.environ.get("PERFBENCH_SAMPLE_MEMORY", "1") != "0"
    summary = _Summary(ms, out / "summary") if rank == 0 else None
    # memory of every run: sampled after each step (PERFBENCH_SAMPLE_MEMORY=0 turns it off, for
    # bench/bench_memory_sampling.py only); the machine's memory is the capacity a CPU run's headroom is against
    ctx.set_meta(machine_memory_bytes=machine_memory_bytes(), memory_sampling=sample_memory)
    ckpt = Checkpoints(ms, wl, cfg, rank, out)
    first = ckpt.restore()  # 0, or the step after the checkpoint a resumed run continues from
    if first:
        ctx.set_meta(resumed_from_step=first)
        if cap is not None:  # the profiler schedule counts from step 0: a resumed run is not profiled
            cap = None
            ctx.set_meta(profiled_steps=None, profile_level="off")

    rec.step = first
    if cap is not None:  # advanced by the recorder after each step, outside the step's time
        rec.set_window(cap, level, prof_steps)
        cap.start()
    finished = False
    try:
        _train(cfg, ctx, wl, ckpt, range(first, int(cfg["train"]["steps"])), summary)
        finished = True
    finally:
        rec.flush()  # a step that raised: the finished steps are in the file before anything else can hang
        if cap is not None and not finished:
            cap.prof.stop()
            rec.window = None
        if summary is not None:
            summary.close()
    ctx.set_meta(os_threads=_os_threads(), framework_peak_allocated_bytes=framework_peak_bytes(ms))
    rec.finish(0)  # the profiler window's stop and MindSpore's parse, then the final meta (finished: true)
    ctx.close()
    if (cfg.get("inject") or {}).get("crash_at_exit_rank") == rank:  # a crash in the teardown, after every write
        import signal

        # after EVERY rank's last write, as in the teardown crash it stands for: msrun kills the other ranks when
        # one dies, so a rank still writing its final meta would be cut short (a race a loaded machine loses)
        _wait_all_finished(rec.metrics_dir, world_size, timeout_s=120.0)
        os.kill(os.getpid(), signal.SIGSEGV)
    return 0


def _start_mindspore(train: dict, threads_per_rank: int | None):
    """(mindspore, its thread pools as set): imported (after a single pinned rank pinned itself to its core), on the
    CPU, its thread pools and mode set before anything runs a kernel."""
    pin = os.environ.get(PIN_VAR)
    if pin is not None and os.environ.get("MS_ROLE") != "MS_SCHED":
        # a single rank with launch.bind_core true: msrun gives it every core, so it pins itself to one before
        # MindSpore starts its threads (they inherit it); the cluster join still runs on all (workloads/pinning.py)
        set_process_affinity({int(pin)})
    import mindspore as ms

    ms.set_device("CPU")
    # MindSpore's thread pools, set before anything runs a kernel (it refuses later changes). A rank pinned to one
    # core with MindSpore's defaults spends 40-70% more CPU time in its steps 5-14 (its thread tuning); with both
    # pools set to 1 it does not. A rank with 2 cores and both pools set to 2 burnt 5-10x the CPU time per step
    # under load (spinning threads), so it keeps MindSpore's defaults (docs/benchmarks.md, "Repeatability").
    ms_threads = {}
    one_core = (threads_per_rank or _cpu_threads()) == 1
    for key, setter in (
        ("kernel_threads", ms.device_context.cpu.op_tuning.threads_num),
        ("dispatch_threads", ms.runtime.dispatch_threads_num),
    ):
        n = train.get(key)
        n = (1 if one_core else "mindspore") if n is None else n
        if n != "mindspore":
            setter(int(n))
        ms_threads[key] = n
    ms.set_context(mode=ms.GRAPH_MODE if train["mode"] == "graph" else ms.PYNATIVE_MODE)
    return ms, ms_threads


def _join_cluster(cfg: dict, world_size: int, startup: dict) -> int:
    """This process's rank, once the cluster is joined (rank 0 alone: no cluster)."""
    rank = 0
    # Under msrun the scheduler process runs this script too (MS_ROLE=MS_SCHED): it must call init(),
    # which serves the cluster and never returns to training, even for world_size 1.
    if world_size > 1 or os.environ.get("MS_ROLE"):
        from mindspore.communication import get_group_size, get_rank, init

        if os.environ.get("MS_ROLE") == "MS_SCHED":
            _write_json(pathlib.Path(cfg["output_dir"]) / "metrics" / "scheduler.startup.json", startup)

        with widened_for_join() as widened:  # a rank msrun pinned to one core joins on all (workloads/pinning.py)
            init()
        startup["init"] = time.time()
        startup["join_widened"] = widened
        rank = get_rank()
        if get_group_size() != world_size:
            raise ConfigError(f"world_size is {world_size} but msrun started {get_group_size()} ranks")
    return rank


def _describe_rank(ctx: RunContext, ms, ms_threads: dict) -> None:
    """The rank's meta before its model exists: who and where it is, its threads, clocks and baseline memory."""
    cfg = ctx.config
    ctx.set_meta(
        rank=ctx.rank,
        world_size=ctx.world_size,
        threads=_cpu_threads(),
        os_threads=None,
        pid=os.getpid(),
        host=socket.gethostname(),
        mindspore_version=ms.__version__,
        mode=cfg["train"]["mode"],
        run_id=cfg.get("run_id"),
        workload=cfg["workload"],
        threads_per_rank=cfg.get("threads_per_rank"),
        affinity=sorted(os.sched_getaffinity(0)),  # the CPUs this rank trains on (after the join's widening)
        ms_threads=ms_threads,
        comm_backend="mccl" if ctx.world_size > 1 else "none",
        clock={
            "steps": "time.time() seconds (Unix epoch)",
            "profiler_ts": "trace_view.json ts is Unix epoch microseconds (same clock as time.time())",
            "profiler_ts_offset_us": 0.0,
        },
    )
    # the process before the model exists (MindSpore imported, collectives joined): what attribution calls the runtime
    ctx.set_meta(baseline_rss_bytes=memory_sample()["rss_bytes"])


def _build_workload(cfg: dict, ctx: RunContext):
    """The workload's `build(ctx)` (workloads.<name>): its model, ready to train."""
    name = cfg["workload"]
    try:
        module = importlib.import_module(f"workloads.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith(f"workloads.{name}"):
            raise ConfigError(f"unknown workload {name!r} (no module workloads.{name})") from None
        raise
    return module.build(ctx)


def _profile_window(cfg: dict, ctx: RunContext, out: pathlib.Path) -> tuple[MsWindow | None, str, int]:
    """(the profiler's window, None when not profiling; its level; its steps): the steps right after warm-up."""
    train = cfg["train"]
    steps = int(train["steps"])
    warmup = int(train["warmup_steps"])
    prof_cfg = cfg.get("profile") or {}
    prof_steps = min(int(prof_cfg.get("steps", 0) or 0), max(0, steps - warmup))
    level = str(prof_cfg.get("level") or "default")
    if level not in PROFILE_LEVELS:
        raise ConfigError(f"profile.level must be one of {', '.join(PROFILE_LEVELS)}, got {level!r}")
    profiling = bool(prof_cfg.get("enabled")) and prof_steps > 0 and PROFILE_LEVELS[level] is not None
    ctx.set_meta(
        profiled_steps=[warmup, warmup + prof_steps - 1] if profiling else None,
        profile_level=level if profiling else "off",
        warmup_steps=warmup,
        steps=steps,
    )
    return (MsWindow(out / "profile", warmup, prof_steps, level) if profiling else None), level, prof_steps


def _train(cfg: dict, ctx: RunContext, wl, ckpt: Checkpoints, steps: range, summary: _Summary | None) -> None:
    """The training loop: each step timed and recorded, with the injected failures and slowdowns around it and a
    checkpoint inside its time; the memory sample, profiler step and record outside it."""
    rec, rank = ctx.recorder, ctx.rank
    slowdown = _Slowdown(cfg.get("inject") or {}, rank)
    for step in steps:
        _inject(cfg, rank, step, ctx)
        ctx._begin_step(step)
        start = time.time()
        rec.begin(start)
        input_wait_s = slowdown.apply()
        res = dict(wl.train_step(step))
        saved_s = ckpt.maybe_save(step)  # inside the step's time: its cost on step time is what we measure
        loss = float(res.pop("loss"))
        samples = int(res.pop("samples"))
        if saved_s is not None:
            res["checkpoint_s"] = saved_s
        if input_wait_s is not None:
            res["input_wait_s"] = input_wait_s  # inject.input_delay_ms: inside step_time_s, before the step
        # the step ends here (end_ts, cpu_s: CPU time of the whole rank process during the step); then, outside
        # its time: the memory sample (max_rss_bytes: high-water mark so far, rss_bytes: resident set now), the
        # profiler window's step (capture_s) and the record
        rec.end(samples, loss, **res, **ctx._comm_counted())
        if summary is not None:
            end = rec.last_end or start
            summary.record(step, loss, end - start, samples / max(end - start, 1e-9))
        if step == 0:
            ctx.set_meta(os_threads=_os_threads())
            ctx.write_meta()


def _wait_all_finished(metrics_dir: pathlib.Path, world_size: int, timeout_s: float) -> None:
    """Until every rank's meta says `finished: true` (its last write), at most `timeout_s`."""
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if all(meta_finished(metrics_dir, r) for r in range(world_size)):
            return
        time.sleep(0.1)


def _write_json(path: pathlib.Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def main(argv=None, entry_ts: float | None = None) -> int:
    ap = argparse.ArgumentParser(description="perfbench workload rank (started by msrun)")
    ap.add_argument("--config", required=True, help="run_config.json written by perfbench sweep")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config)
        return run(cfg, entry_ts)
    except UserError as e:
        print(f"perfbench: error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
