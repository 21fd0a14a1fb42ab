"""MindSpore side of the capture: the profiler window (shared with the reference runner), a `Callback` that
records `Model.train`'s steps, and the patch of `mindspore.train.Model.train` that adds it to a script that
does not. MindSpore is imported inside functions only."""

from __future__ import annotations

import pathlib
import time

from perfbench.capture.recorder import ProfilerWindow, Recorder, current, schedule_args

#: `profile.level`: what the MindSpore profiler records on each profiled step and whether MindSpore's own
#: parser runs. On the CPU backend the profiler records op start/duration (FRAMEWORK/cpu_op_*, what
#: analyzers.parsers.cpu reads); memory and shapes are extras. MindSpore's parser (ASCEND_PROFILER_OUTPUT/
#: trace_view.json, for MindStudio Insight) never runs inside the training loop: at most once, after the
#: last step ("exit"). docs/benchmarks.md has the measured cost of each level.
PROFILE_LEVELS = {  # the same names as perfbench.run.config.PROFILE_LEVELS (tests/unit/test_config.py checks it)
    "off": None,
    "light": {"profile_memory": False, "record_shapes": False, "with_stack": False, "parse": None},
    "default": {"profile_memory": False, "record_shapes": False, "with_stack": False, "parse": "exit"},
    "full": {"profile_memory": True, "record_shapes": True, "with_stack": True, "parse": "exit"},
}


class MsWindow(ProfilerWindow):
    """The MindSpore profiler over steps [warmup_steps, warmup_steps + active) at one `profile.level`.

    At the end of the window MindSpore only stops recording and writes its raw FRAMEWORK files (what
    analyzers.parsers.cpu parses); its own parse (trace_view.json) is deferred to `finish()`, after the last step.
    """

    def __init__(self, profile_dir: pathlib.Path, warmup_steps: int, active: int, level: str = "default"):
        from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        self.opts = PROFILE_LEVELS[level]
        self._ctx: dict | None = None
        profile_dir.mkdir(parents=True, exist_ok=True)
        # p.step() is called after every step; the schedule counts from step 0.
        sched = schedule(**schedule_args(warmup_steps, active))
        tensorboard_trace_handler(str(profile_dir), analyse_flag=False)  # sets the output folder, parses nothing
        self.prof = profile(
            activities=[ProfilerActivity.CPU],
            schedule=sched,
            on_trace_ready=self._window_done,
            profile_memory=self.opts["profile_memory"],
            record_shapes=self.opts["record_shapes"],
            with_stack=self.opts["with_stack"],
        )

    def _window_done(self, _prof) -> None:
        if self.opts["parse"]:  # remember where the window's data is; MindSpore clears it right after
            from mindspore.profiler.common.profiler_context import ProfilerContext

            self._ctx = ProfilerContext().to_dict()

    def stop(self) -> None:
        super().stop()
        self.finish()

    def finish(self) -> None:
        """MindSpore's own parse of the window (ASCEND_PROFILER_OUTPUT/trace_view.json), once, after training."""
        if self._ctx is None:
            return
        from mindspore.profiler.analysis.time_converter import TimeConverter
        from mindspore.profiler.common.log import ProfilerLogger
        from mindspore.profiler.platform.cpu_profiler import CPUProfilerAnalysis

        ctx, self._ctx = self._ctx, None
        (pathlib.Path(ctx["ascend_ms_dir"]) / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
        ProfilerLogger.init(ctx["ascend_ms_dir"])
        TimeConverter.init_parameters(freq=100.0, cntvct=0, localtime_diff=0)  # as MindSpore's online parse does
        CPUProfilerAnalysis._run_tasks(**ctx)


def start_window(rec: Recorder) -> None:
    """The run's profiler window, started before the first step (once per process)."""
    rec.open_window(lambda steps, level: MsWindow(rec.out / "profile", rec.warmup, steps, level))


def _batch_size(cb_params) -> int | None:
    ds = getattr(cb_params, "train_dataset", None)
    try:
        return int(ds.get_batch_size()) if ds is not None else None
    except Exception:  # noqa: BLE001 - a dataset without a batch size: the setting is used
        return None


def _loss(outputs) -> float | None:
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0] if outputs else None
    try:
        return float(outputs.asnumpy()) if hasattr(outputs, "asnumpy") else float(outputs)
    except (TypeError, ValueError):
        return None


_CLASS = None


def callback_class():
    """`perfbench.capture.Callback`: a mindspore.train.Callback that records each step of `Model.train`."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    import mindspore as ms
    from mindspore.train import Callback as _Base

    class Callback(_Base):
        """Add to `Model.train(..., callbacks=[Callback()])`: each training step is recorded (a no-op outside
        `perfbench sweep`). Scripts started by perfbench get it without asking (Model.train is patched)."""

        def __init__(self, recorder: Recorder | None = None):
            super().__init__()
            self.rec = recorder or current()
            self._bs: int | None = None
            self._last = 0

        def on_train_begin(self, run_context):
            rec = self.rec
            if rec is None or rec.mode == "manual":
                return
            rec.mode = rec.mode or "mindspore-callback"
            rec.set_meta(framework="mindspore", mindspore_version=ms.__version__)
            cb = run_context.original_args()
            self._bs = _batch_size(cb)
            self._last = getattr(cb, "cur_step_num", 0) if isinstance(getattr(cb, "cur_step_num", 0), int) else 0
            if self._bs is not None:
                rec.samples_source = "dataset batch size"
            start_window(rec)

        def on_train_step_begin(self, run_context):
            if self.rec is not None and self.rec.mode == "mindspore-callback":
                self.rec.begin()

        def on_train_step_end(self, run_context):
            rec = self.rec
            if rec is None or rec.mode != "mindspore-callback":
                return
            cb = run_context.original_args()
            loss = _loss(getattr(cb, "net_outputs", None))  # waits for the step's result: the step's true end
            # dataset sink mode calls this once per sink of several steps: one record for all of them
            n = getattr(cb, "cur_step_num", None)
            steps = n - self._last if isinstance(n, int) and n > self._last else 1
            self._last = n if isinstance(n, int) else self._last
            if steps > 1:
                rec.set_meta(steps_per_record=steps)
            rec.end(samples=None if self._bs is None else self._bs * steps, loss=loss)

    _CLASS = Callback
    return Callback


def install(rec: Recorder) -> None:
    """Patch `mindspore.train.Model.train` so that every call gets the Callback (unless it has one)."""
    from mindspore.train import Model

    cls = callback_class()
    original = Model.train

    def train(self, epoch, train_dataset, *args, **kwargs):
        if args:
            callbacks, args = args[0], args[1:]
        else:
            callbacks = kwargs.pop("callbacks", None)
        cbs = list(callbacks) if isinstance(callbacks, (list, tuple)) else ([callbacks] if callbacks else [])
        if not any(isinstance(c, cls) for c in cbs):
            cbs.append(cls(rec))
        return original(self, epoch, train_dataset, cbs, *args, **kwargs)

    train.__wrapped__ = original  # type: ignore[attr-defined]
    Model.train = train
    rec.set_meta(framework="mindspore", comm_backend="mccl" if rec.world_size > 1 else "none")
    rec.meta.setdefault("installed_ts", time.time())
