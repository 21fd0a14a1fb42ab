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


# ---- one real tiny sweep per test session, shared by the end-to-end, compare/check and UI tests ----

TINY_SWEEP = {
    "name": "tiny",
    "workload": "resnet50",
    # the real ResNet-50 layout (bottleneck blocks 3-4-6-3), narrow and on small images so CPU steps are short
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [3, 4, 6, 3]},
    "train": {"batch_size": 4, "steps": 9, "warmup_steps": 2, "seed": 0},
    "profile": {"enabled": True, "steps": 3},
    "launch": {"timeout_s": 600, "stall_timeout_s": 240},
    "sweep": {"world_size": [1, 2]},
    "repeats": 2,
}


def free_port(lo: int, hi: int) -> int:
    """A free TCP port on 127.0.0.1 in [lo, hi) (tests keep to their own ranges)."""
    import socket

    for port in range(lo, hi):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port in {lo}-{hi - 1}")


def run_perfbench(*args: str, timeout: float = 900, check: bool = True, cwd=None):
    """Run the real `perfbench` CLI in a subprocess (as a user would) and return the CompletedProcess."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "perfbench", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, cwd=cwd or ROOT)
    if check and r.returncode != 0:
        raise AssertionError(f"perfbench {' '.join(map(str, args))} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return r


def write_yaml(path: Path, obj: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def sweep_store(tmp_path_factory):
    """Results dir of one real sweep: ResNet-50 (narrow) on world sizes 1 and 2, 2 repeats each, via msrun."""
    base = tmp_path_factory.mktemp("sweep_store")
    cfg = write_yaml(base / "tiny.yaml", TINY_SWEEP)
    results = base / "results"
    run_perfbench("sweep", cfg, "--results", results, timeout=1500)
    return results
