"""Parsers for the Ascend profiler output written by MindSpore (`*_ascend_ms`) and torch_npu (`*_ascend_pt`):
the text export (`text.py`), the .db export (`db.py`) and msprof-analyze's cluster output
(`cluster_output.py`). Each returns an `analyzers.schema.Profile`; `analyzers.parsers.load` finds and merges ranks."""

from analyzers.parsers.ascend.db import parse_db_rank
from analyzers.parsers.ascend.text import parse_text_rank, read_kernel_details

__all__ = ["parse_text_rank", "parse_db_rank", "read_kernel_details"]
