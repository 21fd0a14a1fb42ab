"""What perfbench's capture costs a user's PyTorch script (perfbench/capture/torch_capture.py): the optimizer
step hook, the outermost module's forward pre-hook and the per-step record (two clock reads, a memory sample at most
every 50 ms, the values kept for the writer's thread, which makes and writes the JSON lines in batches), against
the step time of examples/own-job/train_pytorch.py's model (MLP 64-h-h-10, SGD with momentum, one process, one
thread, CPU), side by side in one process.

Cycles of `--block` steps without capture, then `--block` steps with it (hooks installed into one Recorder for the
whole run, writing into a temporary run folder, profiler off), the order flipping every cycle. A step's wall time
runs from one step's start to the next one's, so the record made after the step is inside it.

Reported:
- the direct cost, the primary figure (a loaded machine's step times swing more than the capture costs): the CPU
  time spent in capture code per step, measured in the same process while the captured steps run, every hook
  perfbench registers wrapped in a `thread_time_ns` timer (median over steps of the hooks' CPU time in each step;
  `hook_timer_own_us_per_step`: what the timer itself adds, warm, included), plus the batched writes of the records
  (the writer's thread whenever it runs, and the last batch at the end; median over batches of the batch's CPU time
  per record in it), plus torch's dispatch of the two hooks (`dispatch()`: a no-op hook against none); its share of
  the median bare step. CPU time, not wall time: at load 15-30 the process is switched out at a system call's return
  in most steps, and the wall time around a hook then holds the neighbours' time slice (the hooks' wall time is
  reported too);
- per cycle: median captured step / median bare step - 1, the median over cycles and its quartiles;
- the record's parts, each timed alone over 2,000 calls (memory sample, JSON line, append, batched write per line).

    .venv/bin/python bench/bench_script_capture.py --cycles 20 --block 20 [--hidden 512 --batch 64] [--json FILE]

`--hidden` and `--batch` size the model (the examples' `knobs.hidden` and `train.batch_size`): larger steps, the
same capture work per step. The script runs against whichever perfbench it sits in (a git worktree of an older
commit gives the before side; parts that older code lacks are measured its way).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class HookTimer:
    """While active, every hook torch_capture.install registers (the global forward pre-hook, the outermost
    module's pre-hook, the optimizer step post-hook) runs inside a timer: `cpu_ns` their CPU time (thread_time_ns),
    `ns` their wall time (perf_counter_ns).
    The writer's batched writes (StepLog.flush) outside a hook go to `flushes` as (CPU ns, records)."""

    def __init__(self) -> None:
        self.ns = 0
        self.cpu_ns = 0
        self.flushes: list[tuple[int, int]] = []
        self.in_hook = False
        self._saved: list = []

    def wrap(self, fn):
        def timed(*args, **kwargs):
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            self.in_hook = True
            try:
                return fn(*args, **kwargs)
            finally:
                self.in_hook = False
                self.ns += time.perf_counter_ns() - t0
                self.cpu_ns += time.thread_time_ns() - c0

        return timed

    def __enter__(self) -> HookTimer:
        import torch.nn.modules.module as mm
        import torch.optim.optimizer as oo
        from torch import nn

        from perfbench.capture import writer

        reg_global, reg_post, reg_module = (
            mm.register_module_forward_pre_hook,
            oo.register_optimizer_step_post_hook,
            nn.Module.register_forward_pre_hook,
        )
        self._saved = [
            (mm, "register_module_forward_pre_hook", reg_global),
            (oo, "register_optimizer_step_post_hook", reg_post),
            (nn.Module, "register_forward_pre_hook", reg_module),
        ]
        mm.register_module_forward_pre_hook = lambda hook: reg_global(self.wrap(hook))  # type: ignore[assignment]
        oo.register_optimizer_step_post_hook = lambda hook: reg_post(self.wrap(hook))  # type: ignore[assignment]
        nn.Module.register_forward_pre_hook = lambda mod, hook, **kw: reg_module(mod, self.wrap(hook), **kw)  # type: ignore[method-assign]
        log = getattr(writer, "StepLog", None)  # absent in the per-step-write recorder (a before/after run)
        if log is not None:
            flush = log.flush
            main = threading.main_thread()

            def timed_flush(log_self):
                if self.in_hook and threading.current_thread() is main:
                    return flush(log_self)  # inside a hook's time already
                n = len(log_self._pending)
                t0 = time.thread_time_ns()  # CPU time: the writer's thread is preempted as often as not at load 15
                try:
                    return flush(log_self)
                finally:
                    if n:
                        self.flushes.append((time.thread_time_ns() - t0, n))

            self._saved.append((log, "flush", flush))
            log.flush = timed_flush
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, value in self._saved:
            setattr(owner, name, value)


def parts(batch: int, tmp: Path, n: int = 2000) -> dict:
    """The record's parts, each timed alone (median µs per call)."""
    from perfbench.capture import writer
    from perfbench.capture.recorder import Recorder

    def med(fn) -> float:
        ts = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            fn()
            ts.append(time.perf_counter_ns() - t0)
        return statistics.median(ts) / 1e3

    out: dict = {}
    sampler = getattr(writer, "MemorySampler", None)
    out["memory_sample_us"] = med(sampler().sample if sampler else writer.memory_sample)
    mem = writer.memory_sample()
    kept = (0, 1, time.time(), time.time(), batch, 2.302585, False, 0.001, mem, None, {})
    step_line = getattr(writer, "step_line", None)  # absent before the writer made the lines from kept values
    if step_line is not None:
        out["json_line_us"] = med(lambda: step_line(*kept))
    else:
        rec = writer.step_record(0, 1, time.time(), time.time(), batch, 2.302585, False, 0.001, mem)
        out["json_line_us"] = med(lambda: json.dumps(rec) + "\n")
    r = Recorder({"run_id": "parts", "world_size": 1, "output_dir": str(tmp / "parts"), "train": {}}, rank=0)
    r.profile_window = lambda: None  # type: ignore[method-assign]
    ends = []
    for _ in range(n):
        r.begin()
        t0 = time.perf_counter_ns()
        r.end(samples=batch)
        ends.append(time.perf_counter_ns() - t0)
    out["recorder_end_us"] = statistics.median(ends[1:]) / 1e3  # Recorder.end without the hooks around it
    log_cls = getattr(writer, "StepLog", None)
    if log_cls is not None:
        log = log_cls(tmp / "parts" / "flush.jsonl", flush_s=3600)
        line = kept if step_line is not None else writer.step_record(*kept[:9])  # what the recorder keeps
        out["append_us"] = med(lambda: log.append(line))
        per_batch = []
        for _ in range(50):  # a 0.5 s batch of 2 ms steps is ~250 lines
            for _ in range(250):
                log.append(line)
            t0 = time.perf_counter_ns()
            log.flush()
            per_batch.append(time.perf_counter_ns() - t0)
        log.close()
        out["batched_write_per_line_us"] = statistics.median(per_batch) / 250 / 1e3
    r.finish(0)
    return out


def dispatch(n: int = 20000, rounds: int = 7) -> dict:
    """What torch's calls of the hooks cost beside the hooks' own code (median over rounds of CPU ns per call, with a
    no-op hook against none, interleaved): a module with a forward pre-hook leaves `Module.__call__`'s fast path, and
    `Optimizer.step` runs the global post-hooks."""
    import torch
    from torch import nn
    from torch.optim.optimizer import register_optimizer_step_post_hook

    class Identity(nn.Module):
        def forward(self, x):
            return x

    class NoStep(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})

        def step(self, closure=None):
            return None

    m, x = Identity(), torch.zeros(2, 2)
    opt = NoStep([nn.Parameter(torch.zeros(2))])

    def cpu_ns(fn) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        return (time.thread_time_ns() - t0) / n

    fwd, step = [], []
    for _ in range(rounds):
        bare = cpu_ns(lambda: m(x))
        h = m.register_forward_pre_hook(lambda mod, args: None)
        fwd.append(cpu_ns(lambda: m(x)) - bare)
        h.remove()
        bare = cpu_ns(opt.step)
        h = register_optimizer_step_post_hook(lambda o, a, k: None)
        step.append(cpu_ns(opt.step) - bare)
        h.remove()
    return {
        "forward_pre_hook_us": statistics.median(fwd) / 1e3,
        "optimizer_post_hook_us": statistics.median(step) / 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    from torch import nn

    from perfbench.capture import torch_capture
    from perfbench.capture.recorder import Recorder

    torch.manual_seed(0)
    torch.set_num_threads(1)
    h = a.hidden
    net = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(a.batch, 64), torch.randint(0, 10, (a.batch,))

    hook_ns: list[int] = []  # per captured step (the first of each block left out: it writes the first meta)
    hook_cpu_ns: list[int] = []

    def block(n: int, timer: HookTimer | None = None) -> list[float]:
        times, t = [], time.perf_counter()
        for i in range(n):
            loss = loss_fn(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            times.append(now - t)
            t = now
            if timer is not None:
                if i > 0:
                    hook_ns.append(timer.ns)
                    hook_cpu_ns.append(timer.cpu_ns)
                timer.ns = timer.cpu_ns = 0
        return times

    load0 = os.getloadavg()[0]
    block(50)  # warm-up
    tmp = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    cfg = {"run_id": "bench", "world_size": 1, "output_dir": str(tmp), "train": {"warmup_steps": 0}}
    ratios, bare_all, cap_all = [], [], []
    rec = Recorder(cfg, rank=0)  # one recorder and one steps file for all cycles, as in a run
    rec.profile_window = lambda: None  # type: ignore[method-assign]
    with HookTimer() as timer:  # the writer's batches are timed whenever they run, in a bare block too
        for c in range(a.cycles):
            res = {}
            for side in ("bare", "capture") if c % 2 == 0 else ("capture", "bare"):
                if side == "capture":
                    uninstall = torch_capture.install(rec)
                    res[side] = block(a.block, timer)[1:]  # the first step starts before the first boundary
                    uninstall()
                else:
                    res[side] = block(a.block)[1:]
            b, k = statistics.median(res["bare"]), statistics.median(res["capture"])
            ratios.append(k / b - 1)
            bare_all += res["bare"]
            cap_all += res["capture"]
        rec.finish(0)  # the last batch
    flushes = timer.flushes
    load1 = os.getloadavg()[0]
    q = statistics.quantiles(ratios, n=4)
    bare_ms = statistics.median(bare_all) * 1e3
    hooks_us = statistics.median(hook_cpu_ns) / 1e3
    write_us = statistics.median(ns / n for ns, n in flushes) / 1e3 if flushes else 0.0
    calls = dispatch()
    own = HookTimer()  # the timer's own cost per timed call (a no-op timed the same way, warm: a lower bound)
    noop = own.wrap(lambda: None)
    per_call = []
    for _ in range(2000):
        own.cpu_ns = 0
        noop()
        per_call.append(own.cpu_ns)
    timer_own_us = 2 * statistics.median(per_call) / 1e3  # two timed hooks a step (forward pre, step post)
    dispatch_us = calls["forward_pre_hook_us"] + calls["optimizer_post_hook_us"]  # one forward, one step a step
    direct_us = hooks_us + write_us + dispatch_us
    out = {
        "step_ms_bare": bare_ms,
        "step_ms_capture": statistics.median(cap_all) * 1e3,
        "capture_code_us_per_step": direct_us,
        "hooks_us_per_step": hooks_us,
        "hooks_us_per_step_q1_q3": [q / 1e3 for q in statistics.quantiles(hook_cpu_ns, n=4)[::2]],
        "hooks_wall_us_per_step_median_q1_q3": [
            statistics.median(hook_ns) / 1e3,
            *[q / 1e3 for q in statistics.quantiles(hook_ns, n=4)[::2]],
        ],
        "batched_write_us_per_record": write_us,
        "hook_dispatch_us_per_step": dispatch_us,
        "hook_timer_own_us_per_step": timer_own_us,
        "hook_dispatch": calls,
        "batches": len(flushes),
        "capture_share_of_bare_step": direct_us / 1e3 / bare_ms,
        "overhead_median": statistics.median(ratios),
        "overhead_q1": q[0],
        "overhead_q3": q[2],
        "parts": parts(a.batch, tmp),
        "load_average_1min": [load0, load1],
        "hidden": a.hidden,
        "batch": a.batch,
        "cycles": a.cycles,
        "block": a.block,
        "torch": torch.__version__,
        "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
