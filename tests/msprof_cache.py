"""The real msprof-analyze's outputs on the shared fixtures, kept between test sessions.

The parity tests compare perfbench with what `msprof-analyze` (installed in the venv, run as a subprocess) writes
for a fixture. Those runs were most of the fast lane's time (docs/testing.md), and their answer only depends on
the tool and its input. So a run is kept under a key made of msprof-analyze's installed version, its arguments
and the SHA-1 of every byte of the fixture it read; any change to one of them runs the tool again.

* where: `$PERFBENCH_MSPROF_CACHE`, else `~/.cache/perfbench-tests/msprof` (never inside the checkout);
* `PERFBENCH_MSPROF_FRESH=1` runs the tool every time and refreshes the kept copy: `make test` (and so CI) sets
  it, so the full suite always checks against a run of this session;
* a run that failed is never kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

MSPROF = Path(sys.executable).with_name("msprof-analyze")
CACHE = Path(os.environ.get("PERFBENCH_MSPROF_CACHE") or Path.home() / ".cache" / "perfbench-tests" / "msprof")


@dataclass
class MsprofRun:
    work: Path  # the run's folder: the fixture's copy (`data`), any output folder given as {work}/...
    data: Path  # the copy of the fixture msprof-analyze read (and wrote its cluster_analysis_output into)
    stdout: str
    stderr: str
    returncode: int
    kept: bool  # answered from the kept copy of an earlier session's run


def fresh() -> bool:
    return os.environ.get("PERFBENCH_MSPROF_FRESH") == "1"


def _digest(src: Path) -> str:
    h = hashlib.sha1()
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(src)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def run_msprof(src: Path, args: list[str], work: Path, timeout: int = 900) -> MsprofRun:
    """`msprof-analyze ARGS` on a copy of `src` at `work/<src name>`; `{data}` and `{work}` in ARGS are replaced
    by those folders. `work` must not exist yet."""
    if not MSPROF.exists():
        raise FileNotFoundError(f"{MSPROF} not installed (pip install msprof-analyze into the venv)")
    key = hashlib.sha1(json.dumps([metadata.version("msprof-analyze"), args, src.name, _digest(src)]).encode())
    kept = CACHE / key.hexdigest()
    data = work / src.name
    if not fresh() and (kept / "run.json").is_file():
        shutil.copytree(kept, work)
        r = json.loads((work / "run.json").read_text())
        return MsprofRun(work, data, r["stdout"], r["stderr"], r["returncode"], kept=True)
    work.mkdir(parents=True)
    shutil.copytree(src, data)  # WAL-mode dbs: never open the originals
    argv = [str(MSPROF), *(a.replace("{data}", str(data)).replace("{work}", str(work)) for a in args)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    (work / "run.json").write_text(
        json.dumps({"argv": argv, "stdout": proc.stdout, "stderr": proc.stderr, "returncode": proc.returncode})
    )
    if proc.returncode == 0:
        _keep(work, kept)
    return MsprofRun(work, data, proc.stdout, proc.stderr, proc.returncode, kept=False)


def _keep(work: Path, kept: Path) -> None:
    tmp = kept.with_name(f"{kept.name}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(work, tmp)
        shutil.rmtree(kept, ignore_errors=True)
        os.replace(tmp, kept)
    except OSError:  # a read-only or full cache: the tests still have this session's run
        shutil.rmtree(tmp, ignore_errors=True)
