"""msprof output: `mindstudio_profiler_output/` summaries and the older `device_N/timeline/` JSON export."""

from analyzers.parsers.formats import Format, with_hints
from analyzers.parsers.msprof.files import detect
from analyzers.parsers.msprof.parser import SOURCE, parse

#: load_profile parses each claimed folder (a PROF_* job = normally one device) separately, in parallel
PER_RANK = True

#: this module's formats in the registry (analyzers.parsers.formats)
FORMATS = [Format(SOURCE, detect, with_hints(parse), per_rank=PER_RANK)]

__all__ = ["SOURCE", "PER_RANK", "detect", "parse", "FORMATS"]
