"""requirements.lock: every dependency pyproject.toml declares is pinned there at a version it allows, and the
environment the tests run in holds exactly the locked versions (so a result never depends on what a resolver picked
on the day of the install)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line)
        assert m, f"requirements.lock: not an exact pin: {line!r}"
        pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in ("train", "pytorch", "test"):
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def test_every_declared_dependency_is_locked_at_an_allowed_version():
    pins = _lock()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is declared in pyproject.toml but not pinned in requirements.lock"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (
            f"requirements.lock pins {req.name}=={pins[name]}, outside pyproject.toml's {req.specifier}"
        )


def test_the_lock_pins_each_package_once_and_the_known_conflict_is_the_only_one():
    lines = [ln for ln in (ROOT / "requirements.lock").read_text().splitlines() if ln and not ln.startswith("#")]
    names = [canonicalize_name(ln.split("==")[0]) for ln in lines]
    assert len(names) == len(set(names))
    pins = _lock()
    # signal-processing-algorithms declares setuptools<71, torch 2.13 setuptools>=77.3; the lock keeps the newer one
    assert Version(pins["setuptools"]) >= Version("77.0.3")


def test_the_environment_holds_exactly_the_locked_versions():
    wrong = []
    for name, pinned in sorted(_lock().items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "missing"
        if installed != pinned:
            wrong.append(f"{name} {installed} (locked {pinned})")
    assert not wrong, "not the locked versions, run `make install`: " + ", ".join(wrong)
