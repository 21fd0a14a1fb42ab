"""Which framework a capture process runs (from the run config, else from what the script imported) and its
profiler window. Standard library at import."""

from __future__ import annotations

import sys

from perfbench.capture import ms_capture, torch_capture
from perfbench.capture.recorder import Recorder


def framework(rec: Recorder | None = None) -> str | None:
    """`mindspore` | `pytorch`: the run config's `script.framework`, else whichever of the two is imported."""
    fw = ((rec.config.get("script") or {}).get("framework")) if rec is not None else None
    if fw:
        return fw
    if "mindspore" in sys.modules:
        return "mindspore"
    if "torch" in sys.modules:
        return "pytorch"
    return None


def start_window(rec: Recorder) -> None:
    """The profiler window of a hand-written loop (capture.step), in the framework the script uses."""
    fw = framework(rec)
    if fw == "mindspore":
        ms_capture.start_window(rec)
    elif fw == "pytorch":
        torch_capture.start_window(rec)
