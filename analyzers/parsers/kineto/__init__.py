"""PyTorch profiler (Kineto) Chrome traces: CUDA/ROCm GPU traces and CPU-only (gloo) traces."""

from analyzers.parsers.formats import Format
from analyzers.parsers.kineto.parser import SOURCE, detect, parse, parse_trace

#: a folder holds every rank's trace; parsed whole so that two files claiming one rank are caught
FORMATS = [Format(SOURCE, detect, parse, per_rank=False)]

__all__ = ["SOURCE", "detect", "parse", "parse_trace", "FORMATS"]
