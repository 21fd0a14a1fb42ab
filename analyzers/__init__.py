"""Parsers for profiler output (CPU and Ascend formats) into one schema (analyzers.schema), and the
analyses over it. Never imports MindSpore."""

# The facade is also a submodule named `analyze`; importing the function last makes `analyzers.analyze`
# the function (the submodule stays importable as `analyzers.analyze` via sys.modules).
from analyzers.parsers.load import load_profile
from analyzers.analyze import Analysis, analyze

__all__ = ["load_profile", "analyze", "Analysis"]
