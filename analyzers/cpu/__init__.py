"""MindSpore CPU profiler output (what the workloads write on a machine without accelerators)."""

from analyzers.cpu.parser import find_rank_dirs, infer_steps, parse

__all__ = ["parse", "find_rank_dirs", "infer_steps"]
