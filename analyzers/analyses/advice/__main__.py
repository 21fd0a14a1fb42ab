"""`python -m analyzers.analyses.advice [--write]`: print (or write into docs/) the tables generated from the rule
records (analyzers/analyses/advice/docs.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from analyzers.analyses.advice import RULES
from analyzers.analyses.advice.docs import block, generated


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(__file__).resolve().parents[3] / "docs"
    for (doc, name), text in generated(RULES).items():
        if "--write" not in argv:
            print(f"docs/{doc}:\n<!-- {name}:begin -->\n{text}<!-- {name}:end -->\n")
            continue
        path = root / doc
        old = path.read_text()
        now = block(old, name)
        if now is None:
            sys.exit(f"docs/{doc}: no <!-- {name}:begin --> ... <!-- {name}:end --> markers")
        path.write_text(old.replace(f"<!-- {name}:begin -->\n{now}", f"<!-- {name}:begin -->\n{text}", 1))


if __name__ == "__main__":
    main()
