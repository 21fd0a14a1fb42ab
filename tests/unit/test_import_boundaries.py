"""MindSpore stays out of the import path of everything that only reads results (it costs ~2 s and
~400 MB per process, and users analyzing Ascend profiles on a laptop need not install it)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import ROOT

READERS = [
    "perfbench.cli",
    "perfbench.store",
    "perfbench.views.results",
    "perfbench.run.config",
    "perfbench.run.sweep",
    "perfbench.run.ingest",
    "analyzers",
    "analyzers.parsers.cpu",
    "analyzers.analyze",
    "perfbench.predict.model",  # the what-if model reads the store and the workload's pure-Python planners:
    "perfbench.predict.fit",
    "perfbench.predict.replay",
    "workloads.parallel.schedules",  # pipeline simulator
    "workloads.parallel.bucketing",  # gradient buckets
    "workloads.parallel.zero",  # ZeRO shard planning (its cells import MindSpore only when built)
    "perfbench.predict.memory",
    "perfbench.tune.memory",
    "analyzers.analyses.advice",
]


def test_readers_do_not_import_mindspore():
    code = (
        "import importlib, pkgutil, sys\n"
        f"mods = {READERS!r}\n"
        "import perfbench.commands as c\n"
        "mods += ['perfbench.commands.' + m.name for m in pkgutil.iter_modules(c.__path__)]\n"
        "import dashboards\n"
        "mods += ['dashboards.' + m.name for m in pkgutil.iter_modules(dashboards.__path__)]\n"
        "for m in mods: importlib.import_module(m)\n"
        "from perfbench.cli import build_parser; build_parser()\n"
        "bad = sorted(m for m in sys.modules if m == 'mindspore' or m.startswith('mindspore.'))\n"
        "print(len(mods), bad[:5])\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(r.stdout.split()[0]) > len(READERS)
