"""`perfbench schema`: the sweep YAML's JSON Schema, generated from the config models
(perfbench/run/config_models.py)."""

from __future__ import annotations

import json
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "schema",
        help="write the sweep YAML's JSON Schema (for editor completion and checks)",
        description="Write the JSON Schema of a sweep config (every section, key, type, range, default "
        "and description, generated from the pydantic models that validate it). Point your "
        "editor at it, e.g. with a first line `# yaml-language-server: $schema=perfbench-"
        "sweep.schema.json` in the YAML (VS Code's YAML extension, Neovim/Helix with "
        "yaml-language-server). See docs/config.md.",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    p.add_argument("--json", action="store_true", help="the schema is JSON either way (accepted like every command's)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.run.config_models import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0
