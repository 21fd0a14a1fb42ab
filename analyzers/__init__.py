"""Parsers for profiler output (CPU and Ascend formats) into one schema (analyzers.schema), and the
analyses over it. Never imports MindSpore.

The package itself is light: `analyzers.load_profile`, `analyzers.analyze` and `analyzers.Analysis` (the
facade) load the parsers and analyses, and with them pandas, on first use, so a light module of the package
(`analyzers.catalogue`) imports without them (the CLI's start-up: docs/architecture.md, "Heavy libraries")."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzers.analyze import Analysis, analyze
    from analyzers.parsers.load import load_profile

__all__ = ["load_profile", "analyze", "Analysis"]

_FACADE = {"load_profile": "analyzers.parsers.load", "analyze": "analyzers.analyze", "Analysis": "analyzers.analyze"}


def __getattr__(name: str):
    if name not in _FACADE:
        raise AttributeError(f"module 'analyzers' has no attribute {name!r}")
    value = getattr(importlib.import_module(_FACADE[name]), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """The facade's `analyze` is the function, also once the submodule of the same name is imported (the
    import system then binds the submodule on its package; it stays importable via sys.modules)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "analyze" and isinstance(value, types.ModuleType):
            value = value.analyze
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
