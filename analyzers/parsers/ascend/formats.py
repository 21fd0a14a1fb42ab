"""The Ascend formats in the registry (analyzers.parsers.formats): the text export, the .db export and
msprof-analyze's cluster output. The parser modules are imported when a format is used."""

from __future__ import annotations

from pathlib import Path

from analyzers.parsers.formats import Format
from analyzers.schema import Profile


def _text_parse(d: Path, **kw) -> Profile:
    from analyzers.parsers.ascend.text import parse_text_rank

    return parse_text_rank(
        d,
        read_trace=kw.get("read_trace", "auto"),
        fit=False,
        read_kernels=kw.get("read_kernels", True),
        columns=True,
        memory_detail=kw.get("memory_detail", True),
        read_sizes=kw.get("read_sizes", False),
    )


def _text_detect(d: Path) -> bool:
    from analyzers.parsers.ascend.text import is_text_rank

    return is_text_rank(d)


def _db_parse(d: Path, **kw) -> Profile:
    from analyzers.parsers.ascend.db import parse_db_rank

    return parse_db_rank(d, read_kernels=kw.get("read_kernels", True))


def _db_detect(d: Path) -> bool:
    from analyzers.parsers.ascend.db import is_db_rank

    return is_db_rank(d)


def _cluster_output_detect(d: Path) -> bool:
    from analyzers.parsers.ascend.cluster_output import detect

    return detect(d)


def _cluster_output_parse(d: Path, **kw) -> Profile:
    from analyzers.parsers.ascend.cluster_output import parse

    return parse(d)


FORMATS = [
    Format("ascend-db", _db_detect, _db_parse, per_rank=True),
    Format("ascend-text", _text_detect, _text_parse, per_rank=True),
    Format("msprof-analyze-cluster", _cluster_output_detect, _cluster_output_parse, per_rank=False),
]
