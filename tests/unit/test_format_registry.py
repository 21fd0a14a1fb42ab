"""The one format registry (analyzers/parsers/formats.py): every format comes in through it, in its order,
and a parser module that cannot be imported is reported by name, never skipped in silence."""

from __future__ import annotations

import pytest

from analyzers.parsers import formats as F


@pytest.fixture
def fresh(monkeypatch):
    """An empty registry that loads FORMAT_MODULES again (the real one is restored afterwards)."""
    monkeypatch.setattr(F, "REGISTERED", [])
    monkeypatch.setattr(F, "_IMPORT_ERRORS", {})
    monkeypatch.setattr(F, "_loaded", False)
    return F


def test_every_format_registers_through_the_protocol(fresh):
    names = [f.name for f in fresh.formats()]
    assert names == [
        "ascend-db",
        "ascend-text",
        "msprof-analyze-cluster",
        "msprof",
        "mindspore-legacy",
        "mindspore-cpu",
        "kineto",
    ]
    assert all(isinstance(f, F.ProfileFormat) for f in fresh.formats())
    assert fresh.import_errors() == {}


def test_a_parser_that_fails_to_import_is_reported_by_name(fresh, monkeypatch):
    monkeypatch.setattr(F, "FORMAT_MODULES", ("analyzers.parsers.no_such_parser",) + F.FORMAT_MODULES)
    with pytest.warns(F.FormatImportWarning, match=r"analyzers\.parsers\.no_such_parser.*ModuleNotFoundError"):
        names = [f.name for f in fresh.formats()]
    assert "kineto" in names and "ascend-text" in names  # the others still load
    assert "ModuleNotFoundError" in fresh.import_errors()["analyzers.parsers.no_such_parser"]


def test_a_parser_that_raises_on_import_is_reported(fresh, monkeypatch):
    real = F.importlib.import_module

    def import_module(name, *a, **k):
        if name == "analyzers.parsers.broken":
            raise RuntimeError("bad parser")
        return real(name, *a, **k)

    monkeypatch.setattr(F, "FORMAT_MODULES", ("analyzers.parsers.broken", "analyzers.parsers.kineto"))
    monkeypatch.setattr(F.importlib, "import_module", import_module)
    with pytest.warns(F.FormatImportWarning, match=r"analyzers\.parsers\.broken.*RuntimeError: bad parser"):
        assert [f.name for f in fresh.formats()] == ["kineto"]


def test_register_puts_a_format_before_another(fresh):
    fmt = F.Format("marker", lambda d: False, lambda d, **kw: None)
    fresh.register(fmt, before="ascend-db")
    assert fresh.formats()[0] is fmt
    fresh.register(F.Format("marker", lambda d: False, lambda d, **kw: None))
    assert [f.name for f in fresh.formats()].count("marker") == 1
