"""Legacy MindSpore 1.x `profiler/` output (step_trace_raw, hccl_raw, pipeline-parallel, timeline)."""

from analyzers.parsers.formats import Format, with_hints
from analyzers.parsers.legacy.files import detect
from analyzers.parsers.legacy.parser import SOURCE, parse

#: this module's formats in the registry (analyzers.parsers.formats)
FORMATS = [Format(SOURCE, detect, with_hints(parse), per_rank=False)]

__all__ = ["SOURCE", "detect", "parse", "FORMATS"]
