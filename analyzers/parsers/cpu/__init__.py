"""MindSpore CPU profiler output (what the workloads write on a machine without accelerators)."""

from pathlib import Path

from analyzers.parsers.formats import Format, with_hints
from analyzers.parsers.cpu.parser import find_rank_dirs, infer_steps, is_cpu_profile_dir, parse

#: registration with analyzers.parsers.load (format detection for `perfbench analyze`)
SOURCE = "mindspore-cpu"
PER_RANK = False  # one folder holds every rank, so collectives can be aligned across ranks


def detect(d: Path) -> bool:
    """A CPU rank folder, or a folder whose direct children are CPU rank folders (a run's profile/)."""
    d = Path(d)
    if is_cpu_profile_dir(d):
        return True
    try:
        return any(c.is_dir() and is_cpu_profile_dir(c) for c in d.iterdir())
    except OSError:
        return False


#: this module's formats in the registry (analyzers.parsers.formats)
FORMATS = [Format(SOURCE, detect, with_hints(parse), per_rank=PER_RANK)]

__all__ = ["parse", "detect", "find_rank_dirs", "infer_steps", "SOURCE", "PER_RANK", "FORMATS"]
