"""Legacy MindSpore 1.x `profiler/` output (step_trace_raw, hccl_raw, pipeline-parallel, timeline)."""

from analyzers.parsers.legacy.parser import SOURCE, detect, parse

__all__ = ["SOURCE", "detect", "parse"]
