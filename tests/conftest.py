"""Shared test fixtures. Real Ascend profiler outputs are read from ../shared/fixtures (never copied)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = (ROOT.parent / "shared" / "fixtures" / "ascend").resolve()


def fixture_path(*parts: str) -> Path:
    """Path to a real fixture under ../shared/fixtures/ascend; fails loudly if it is missing."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        raise FileNotFoundError(f"fixture {p} is missing (is ../shared/fixtures beside the checkout?)")
    return p


@pytest.fixture
def fixture_copy(tmp_path):
    """Copy a fixture file or folder into tmp_path (for SQLite WAL files and corrupt variants)."""

    def _copy(*parts: str) -> Path:
        src = fixture_path(*parts)
        dst = tmp_path / src.name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
        return dst

    return _copy
