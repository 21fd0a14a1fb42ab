"""PyTorch side of the capture: steps from the optimizer's step hooks (a global post-hook on
`torch.optim.Optimizer.step`), samples from the batch dimension of the outermost module's input, and the
profiler window (`torch.profiler.profile` with a schedule, CPU activity, one Chrome trace per rank under
`artifacts/profile/`). torch is imported inside functions only."""

from __future__ import annotations

from perfbench.capture.recorder import ProfilerWindow, Recorder, schedule_args


class TorchWindow(ProfilerWindow):
    """torch.profiler over steps [warmup, warmup + active): `rank{R}.<time>.pt.trace.json` under the profile folder."""

    def __init__(self, rec: Recorder, active: int, level: str):
        import torch.profiler as tp

        folder = rec.out / "profile"
        folder.mkdir(parents=True, exist_ok=True)
        sched = tp.schedule(**schedule_args(rec.warmup, active))
        full = level == "full"
        self.prof = tp.profile(
            activities=[tp.ProfilerActivity.CPU],
            schedule=sched,
            on_trace_ready=tp.tensorboard_trace_handler(str(folder), worker_name=f"rank{rec.rank}"),
            # the input shapes and types are the only size a gloo collective has in the trace (its `gloo:*`
            # annotation's Input Dims / Input type; gloo records no record_param_comms): on except at `light`
            record_shapes=level != "light",
            profile_memory=full,
            with_stack=full,
        )


def start_window(rec: Recorder) -> None:
    """The run's profiler window, started before the first step (once per process)."""
    rec.open_window(lambda steps, level: TorchWindow(rec, steps, level))


def _rows(args) -> int | None:
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return None


def install(rec: Recorder):
    """Global hooks: a step ends when the first optimizer seen finishes `step()`; the next starts there (step 0
    starts at the first forward of a module). Samples: the batch dimension of the outermost module's inputs, summed
    over its forwards with gradients on (accumulation); else the `train.batch_size` setting."""
    import torch
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    state: dict = {"opt": None, "outer": None, "samples": None, "global": None, "outer_handle": None}
    rec.set_meta(framework="pytorch", torch_version=torch.__version__)

    def first_step_begins() -> None:
        if rec.mode is None:
            rec.mode = "optimizer-hook"
        if rec.mode == "optimizer-hook" and rec.step == 0 and not rec.open:
            start_window(rec)
            rec.begin()

    def outer_pre(module, args):
        if rec.mode == "manual" or not torch.is_grad_enabled():
            return
        if rec.step == 0 and not rec.open:
            first_step_begins()
        n = _rows(args)
        if n is not None:
            state["samples"] = (state["samples"] or 0) + n

    def global_pre(module, args):
        # the first module called is the outermost one (it calls the others): hook it alone from now on
        if state["outer"] is None and torch.is_grad_enabled():
            state["outer"] = module
            state["outer_handle"] = module.register_forward_pre_hook(outer_pre)
            state["global"].remove()
            outer_pre(module, args)

    def post(optimizer, args, kwargs):
        if state["opt"] is None:
            state["opt"] = id(optimizer)
        if id(optimizer) != state["opt"] or rec.mode == "manual":
            return
        if rec.mode is None:
            first_step_begins()
        if rec.step == 0:  # the process group is up by the first step (and may be gone at the end)
            rec.set_meta(comm_backend=backend_name() or "none")
        samples = state["samples"]
        if samples is not None and rec.samples_source is None:
            rec.samples_source = "input batch dimension"
        state["samples"] = None
        rec.end(samples=samples)
        # the next step starts after this one's record is kept (its wall time is in neither); its CPU time from this
        # one's end unless a memory sample or the profiler's step came between (one system call fewer in most steps;
        # the record's few us of Python go to the next step's cpu_s)
        rec.begin(cpu=rec.last_cpu)

    state["global"] = register_module_forward_pre_hook(global_pre)
    handles = [state["global"], register_optimizer_step_post_hook(post)]

    def uninstall() -> None:
        """Remove the hooks (bench/bench_script_capture.py: capture on and off in one process)."""
        for h in handles:
            h.remove()
        if state["outer_handle"] is not None:
            state["outer_handle"].remove()

    return uninstall


def backend_name() -> str | None:
    try:
        import torch.distributed as dist

        return dist.get_backend() if dist.is_available() and dist.is_initialized() else None
    except Exception:  # noqa: BLE001 - unknown, not a failure
        return None
