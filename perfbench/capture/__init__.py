"""perfbench.capture: a training script's steps, samples, memory and profiler window, in the records the
reference workloads write (docs/workloads.md, "Your own job"), so every analysis works on the user's job.

Scripts started by `perfbench sweep` (workload: script) need nothing: the bootstrap (`perfbench.capture.run`)
finds MindSpore's `Model.train` steps and PyTorch's optimizer steps by itself. A hand-written loop it cannot
see takes one line:

    from perfbench import capture
    for batch in data:
        with capture.step(samples=len(batch)) as s:
            ...
            s.loss = float(loss)

`capture.Callback()` is the MindSpore callback; `capture.settings()` the run's settings; `capture.apply_parallel()`
applies its `parallel.*` knobs. Outside perfbench every call is a no-op. Light: standard library at import,
the framework only when used.
"""

from __future__ import annotations

from perfbench.capture import framework, ms_capture
from perfbench.capture.parallel import apply_parallel
from perfbench.capture.recorder import Recorder, current, settings

__all__ = ["Callback", "apply_parallel", "settings", "step"]


class _Step:
    """What `capture.step()` returns and its block gets: set `loss` (a float) and `samples` inside the block if known
    only there. A plain context manager (a generator-based one cost ~1.7 us more a step, docs/benchmarks.md)."""

    __slots__ = ("samples", "loss", "_rec")

    def __init__(self, samples: int | None, loss: float | None):
        self.samples = samples
        self.loss = loss
        self._rec: Recorder | None = None

    def __enter__(self) -> _Step:
        rec = self._rec = current()
        if rec is not None:
            if rec.mode != "manual":
                rec.mode = "manual"
                rec.open = False
            if rec.step == 0 and rec.window is None:
                framework.start_window(rec)
            rec.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        rec = self._rec
        if rec is None or exc_type is not None:  # not recorded if the block raised (the exception goes on)
            return
        samples, loss = self.samples, self.loss
        if samples is not None and rec.samples_source is None:
            rec.samples_source = "capture.step(samples=...)"
        rec.end(samples=samples, loss=None if loss is None else float(loss))


def step(samples: int | None = None, loss: float | None = None) -> _Step:
    """One training step of a hand-written loop, recorded when the block ends (not if it raises). Once used,
    the automatic step detection of the bootstrap stands down, so steps are not counted twice."""
    return _Step(samples, loss)


def __getattr__(name: str):
    if name == "Callback":  # a mindspore.train.Callback subclass, made on first use
        return ms_capture.callback_class()
    raise AttributeError(name)
