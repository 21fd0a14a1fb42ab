"""Open the runs' MindSpore summary files in MindInsight 2.3.1, in its own isolated environment.

MindInsight 2.3.1 (its last release) pins protobuf 3.x (<=3.20.1) while MindSpore 2.10 needs a newer
protobuf, so it cannot live in the project's environment. `ensure_venv()` creates a separate venv on first
use (default `~/.cache/perfbench/mindinsight-venv`, override with $PERFBENCH_MINDINSIGHT_VENV) and
installs `mindinsight==2.3.1` into it with pip.

MindInsight lists a "train job" for every *direct* subdirectory of its summary base dir that holds
summary files, and it skips symbolic links. Runs keep theirs at `runs/<run_id>/artifacts/summary/`
(three levels down), so `build_summary_view()` makes a view folder outside the results (default
`~/.cache/perfbench/mindinsight-view/<hash of the results path>/`) with one folder per run whose files
are hard links to the run's summary files (copies when hard links are impossible). The results folder
itself is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from perfbench.errors import UserError
from perfbench.store import Store

MINDINSIGHT_VERSION = "2.3.1"
SUMMARY_RE = re.compile(r"summary\.\d+|\.pb$")
API = "/v1/mindinsight/datavisual/train-jobs"


def cache_root() -> Path:
    return Path(os.environ.get("PERFBENCH_CACHE", Path.home() / ".cache" / "perfbench"))


def venv_path() -> Path:
    return Path(os.environ.get("PERFBENCH_MINDINSIGHT_VENV", cache_root() / "mindinsight-venv"))


def mindinsight_bin(venv: Path | None = None) -> Path:
    return (venv or venv_path()) / "bin" / "mindinsight"


def _base_python() -> str:
    """A python of the same minor version that is not inside the project venv."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return base


def ensure_venv(venv: Path | None = None, *, log=print, timeout: float = 1800) -> Path:
    """Create the isolated MindInsight venv if it is missing (or broken). Returns the `mindinsight` executable."""
    venv = venv or venv_path()
    exe = mindinsight_bin(venv)
    if exe.exists() and _installed_version(venv) == MINDINSIGHT_VERSION:
        return exe
    log(f"creating MindInsight {MINDINSIGHT_VERSION} environment at {venv} (first use; ~470 MB, a few minutes)")
    try:
        if not (venv / "bin" / "python").exists():
            subprocess.run(
                [_base_python(), "-m", "venv", str(venv)],
                check=True,
                timeout=300,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"mindinsight=={MINDINSIGHT_VERSION}"],
            check=True,
            timeout=timeout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except subprocess.CalledProcessError as exc:
        tail = (exc.stdout or b"").decode(errors="replace").strip().splitlines()[-8:]
        raise UserError(
            f"could not install mindinsight=={MINDINSIGHT_VERSION} into {venv}:\n  " + "\n  ".join(tail), exit_code=1
        ) from None
    except subprocess.TimeoutExpired:
        raise UserError(f"installing mindinsight into {venv} timed out", exit_code=1) from None
    if not exe.exists():
        raise UserError(f"{exe} missing after installing mindinsight=={MINDINSIGHT_VERSION}", exit_code=1)
    return exe


def _installed_version(venv: Path) -> str | None:
    for p in (venv / "lib").glob("python3*/site-packages/mindinsight-*.dist-info"):
        return p.name[len("mindinsight-") : -len(".dist-info")]
    return None


def summary_dirs(store: Store) -> dict[str, Path]:
    """Train-job name -> folder holding a run's summary files (a run with several summary folders gives several)."""
    out: dict[str, Path] = {}
    for rec in store.list_runs():
        root = store.run_dir(rec["run_id"]) / "artifacts" / "summary"
        if not root.is_dir():
            continue
        for d, _dirs, files in os.walk(root):
            if any(SUMMARY_RE.search(f) for f in files):
                rel = Path(d).relative_to(root)
                name = rec["run_id"] if str(rel) == "." else f"{rec['run_id']}__{str(rel).replace(os.sep, '_')}"
                out[name] = Path(d)
    return out


def view_dir(store: Store) -> Path:
    h = hashlib.sha1(str(store.root.resolve()).encode()).hexdigest()[:12]
    return cache_root() / "mindinsight-view" / h


def build_summary_view(store: Store, view: Path | None = None) -> tuple[Path, dict[str, Path]]:
    """(Re)build the flat summary base dir MindInsight reads: one folder per run, files hard-linked."""
    view = view or view_dir(store)
    dirs = summary_dirs(store)
    base = view / "summaries"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    for name, src in dirs.items():
        dst = base / name
        dst.mkdir()
        for f in src.iterdir():
            if f.is_file() and SUMMARY_RE.search(f.name):
                try:
                    os.link(f, dst / f.name)
                except OSError:
                    shutil.copy2(f, dst / f.name)
    (view / "workspace").mkdir(parents=True, exist_ok=True)
    return base, dirs


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def train_jobs(port: int, host: str = "127.0.0.1") -> list[dict]:
    jobs, offset = [], 0
    while True:
        page = _get(f"http://{host}:{port}{API}?offset={offset}&limit=100")
        batch = page.get("train_jobs", [])
        jobs += batch
        if len(batch) < 100:
            return jobs
        offset += 1


def scalar_tags(port: int, train_id: str, host: str = "127.0.0.1") -> list[str]:
    from urllib.parse import quote

    data = _get(
        f"http://{host}:{port}/v1/mindinsight/datavisual/plugins?train_id={quote(train_id, safe='')}&manual_update=true"
    )
    return list((data.get("plugins") or {}).get("scalar", []))


class MindInsight:
    """A MindInsight server over a store's summaries: start(), train_jobs(), stop() (also a context manager)."""

    def __init__(self, store: Store, port: int = 8080, venv: Path | None = None, log=print):
        self.store, self.port, self.venv, self.log = store, port, venv, log
        self.exe: Path | None = None
        self.base: Path | None = None
        self.dirs: dict[str, Path] = {}
        self.view = view_dir(store)

    def start(self, timeout: float = 120.0) -> "MindInsight":
        self.exe = ensure_venv(self.venv, log=self.log)
        self.base, self.dirs = build_summary_view(self.store, self.view)
        if not self.dirs:
            raise UserError(
                f"no MindSpore summary files under {self.store.root}/runs/*/artifacts/summary/ "
                "(runs made by `perfbench sweep` write them; imported profiles have none)"
            )
        cmd = [
            str(self.exe),
            "start",
            "--port",
            str(self.port),
            "--summary-base-dir",
            str(self.base),
            "--workspace",
            str(self.view / "workspace"),
            "--reload-interval",
            "3",
        ]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.exe.parent}:{env.get('PATH', '')}"
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env)
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise UserError(f"mindinsight start failed (exit {proc.returncode}):\n{out.strip()[-1500:]}", exit_code=1)
        end = time.time() + timeout
        while True:
            try:
                self.train_jobs()
                return self
            except (urllib.error.URLError, OSError, ValueError):
                if time.time() > end:
                    self.stop()
                    raise UserError(
                        f"MindInsight did not answer on 127.0.0.1:{self.port} within {timeout:.0f}s", exit_code=1
                    ) from None
                time.sleep(1)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def train_jobs(self) -> list[dict]:
        return train_jobs(self.port)

    def wait_for_jobs(self, names, timeout: float = 60.0) -> list[dict]:
        """MindInsight scans the summary dir in the background: wait until every name is listed."""
        want = {f"./{n}" for n in names}
        end = time.time() + timeout
        while True:
            jobs = self.train_jobs()
            if want <= {j.get("train_id") for j in jobs} or time.time() > end:
                return jobs
            time.sleep(1)

    def stop(self) -> None:
        if self.exe is None:
            return
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        subprocess.run(
            [str(self.exe), "stop", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
            env=env,
        )

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def scalar_values(port: int, train_id: str, tag: str, host: str = "127.0.0.1") -> list[dict]:
    """[{step, value, wall_time}] of one scalar tag, as MindInsight serves it."""
    from urllib.parse import quote

    data = _get(
        f"http://{host}:{port}/v1/mindinsight/datavisual/scalar/metadata?train_id={quote(train_id, safe='')}"
        f"&tag={quote(tag, safe='')}"
    )
    return list(data.get("metadatas") or [])
