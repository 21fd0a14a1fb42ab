"""The one way a profiler format comes in: the `ProfileFormat` protocol and the format registry.

A format is an object with

    name: str                       the Profile's `source`, e.g. "ascend-text", "kineto"
    per_rank: bool                  True: one rank per claimed folder (parsed in parallel and merged);
                                    False: a claimed folder is parsed whole into a (multi-rank) Profile
    detect(dir) -> bool             does this folder hold the format? (look at `dir` and its direct
                                    children only, never deep; cheap: it runs on every folder of a walk)
    parse(dir, **kw) -> Profile     kw: read_trace, read_kernels (bool), hints (dict) - take what you use

A parser module declares its formats in a module-level `FORMATS` list (`Format(...)` builds one from
functions) and is named once in `FORMAT_MODULES` below; the order there is the detection order (the
first format whose `detect` accepts a folder claims it). A module that fails to import is reported (a
`FormatImportWarning` naming the module and the error, kept in `import_errors()`), never silently skipped.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from analyzers.schema import Profile


@runtime_checkable
class ProfileFormat(Protocol):
    name: str
    per_rank: bool

    def detect(self, d: Path) -> bool: ...

    def parse(self, d: Path, **kw) -> Profile: ...


@dataclass(frozen=True)
class Format:
    """A ProfileFormat from two functions."""

    name: str
    detect: Callable[[Path], bool]
    parse: Callable[..., Profile]
    per_rank: bool = True


def with_hints(parse: Callable[..., Profile]) -> Callable[..., Profile]:
    """`parse(dir, **kw)` for a parser `parse(dir, [workload_steps=..., meta=...])`: calls it with the
    `hints` its signature accepts and drops the loader's other options."""
    accepted = set(inspect.signature(parse).parameters)

    def call(d, **kw):
        hints = kw.get("hints") or {}
        return parse(d, **{k: v for k, v in hints.items() if k in accepted})

    return call


#: the parser modules, in detection order (each has a module-level `FORMATS` list)
FORMAT_MODULES = (
    "analyzers.parsers.ascend.formats",
    "analyzers.parsers.msprof",
    "analyzers.parsers.legacy",
    "analyzers.parsers.cpu",
    "analyzers.parsers.kineto",
)


class FormatImportWarning(UserWarning):
    """A parser module named in FORMAT_MODULES could not be imported: its formats are not tried."""


#: the registered formats, in detection order (filled on first use by `formats()`)
REGISTERED: list[ProfileFormat] = []
_IMPORT_ERRORS: dict[str, str] = {}
_loaded = False


def formats() -> list[ProfileFormat]:
    """Every registered format, in detection order; imports FORMAT_MODULES on first use."""
    global _loaded
    if not _loaded:
        _loaded = True
        for modname in FORMAT_MODULES:
            for f in _module_formats(modname):
                if all(g.name != f.name for g in REGISTERED):
                    REGISTERED.append(f)
    return REGISTERED


def _module_formats(modname: str) -> list[ProfileFormat]:
    try:
        mod = importlib.import_module(modname)
    except Exception as exc:  # any import failure of a parser is reported, never fatal to the others
        _IMPORT_ERRORS[modname] = f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"profile format module {modname} not loaded ({type(exc).__name__}: {exc}); its formats are not tried",
            FormatImportWarning,
            stacklevel=3,
        )
        return []
    found = list(getattr(mod, "FORMATS", ()))
    bad = [f for f in found if not isinstance(f, ProfileFormat)]
    if bad or not found:
        _IMPORT_ERRORS[modname] = "no FORMATS list of ProfileFormat objects"
        warnings.warn(f"profile format module {modname} has no FORMATS to register", FormatImportWarning, stacklevel=3)
        return [f for f in found if isinstance(f, ProfileFormat)]
    return found


def import_errors() -> dict[str, str]:
    """{module: error} for the parser modules that could not be loaded (after `formats()`)."""
    formats()
    return dict(_IMPORT_ERRORS)


def get(name: str) -> ProfileFormat:
    return next(f for f in formats() if f.name == name)


def register(fmt: ProfileFormat, *, before: str | None = None) -> None:
    """Add (or replace) a format at run time (tests, extensions); `before` puts it ahead of an entry."""
    regs = formats()
    regs[:] = [f for f in regs if f.name != fmt.name]
    names = [f.name for f in regs]
    regs.insert(names.index(before) if before in names else len(regs), fmt)
