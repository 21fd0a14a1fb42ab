"""The profiler window's schedule: which steps MindSpore's and PyTorch's profilers record (hand-counted)."""

from __future__ import annotations

from perfbench.capture.recorder import schedule_args


def _recorded(args: dict, steps: int) -> list[int]:
    # the frameworks' schedule, step() called after every step from step 0: `wait` steps idle, `warmup` steps
    # traced and thrown away, `active` steps recorded, then (repeat=1) nothing more
    cycle = args["wait"] + args["warmup"] + args["active"]
    return [s for s in range(steps) if s < cycle * args["repeat"] and s % cycle >= args["wait"] + args["warmup"]]


def test_the_window_records_the_steps_after_warm_up():
    assert schedule_args(3, 4) == {"wait": 2, "warmup": 1, "active": 4, "repeat": 1}
    assert _recorded(schedule_args(3, 4), 20) == [3, 4, 5, 6]
    assert _recorded(schedule_args(1, 2), 20) == [1, 2]


def test_no_warm_up_records_from_the_first_step():
    assert schedule_args(0, 3) == {"wait": 0, "warmup": 0, "active": 3, "repeat": 1}
    assert _recorded(schedule_args(0, 3), 10) == [0, 1, 2]
