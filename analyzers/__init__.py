"""Parsers for profiler output (CPU and Ascend formats) into one schema (analyzers.schema), and the
analyses over it. Never imports MindSpore."""
