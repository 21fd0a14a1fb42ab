"""Benchmark: CLI start-up (targets: `perfbench --help` and every `perfbench COMMAND --help` < 0.3 s,
`perfbench ls` on 500 stored runs < 0.6 s).

    .venv/bin/python bench/bench_cli_startup.py --runs 500 --repeats 7 [--source RESULTS] [--keep DIR]

Builds a store of `--runs` runs by copying real runs: by default it imports set B level1 and level2 (text
export) and set C level1 (`.db` export) from /work/shared/fixtures with `perfbench analyze` (three real
imports, each with its run record and its ~30 analysis tables); `--source RESULTS` copies the runs of an
existing results folder instead (e.g. a real sweep's). Copy i gets the run id `<id>-c<i>` and sweep id
`copies-<i // 10>`; its tables are hard links to the original's (same bytes on disk, no extra space).
Then it times each command as a whole process (interpreter start included), `--repeats` times after one
warm-up run, and prints min / median / max wall seconds; quote the median. The load (`uptime`) is printed
before and after: on a shared machine the figures move with it. The same commands timed from outside:

    farm-bench -n 10 -- .venv/bin/perfbench --help
    farm-bench -n 10 -- .venv/bin/perfbench ls --results DIR     (DIR: a store built with --keep DIR)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "ascend" / "Ascend__msinsight" / "test" / "data" / "pytorch"
SOURCES = [FIXTURES / "text" / "level1", FIXTURES / "text" / "level2", FIXTURES / "db" / "level1"]
PERFBENCH = [sys.executable, "-m", "perfbench"]


def import_sources(results: Path) -> Path:
    for src in SOURCES:
        subprocess.run(
            [*PERFBENCH, "analyze", str(src), "--results", str(results)],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
    return results


def build_store(source: Path, root: Path, n: int) -> None:
    runs = sorted(d for d in (source / "runs").iterdir() if (d / "run.json").exists())
    if not runs:
        sys.exit(f"no runs in {source}")
    for i in range(n):
        src = runs[i % len(runs)]
        rec = json.loads((src / "run.json").read_text())
        rid = f"{rec['run_id']}-c{i:03d}"
        rec.update(run_id=rid, sweep_id=f"copies-{i // 10:02d}")
        dst = root / "runs" / rid
        (dst / "tables").mkdir(parents=True)
        for t in (src / "tables").glob("*.parquet"):
            os.link(t, dst / "tables" / t.name)
        (dst / "run.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")


def commands() -> list[list[str]]:
    """`--help`, then `COMMAND --help` for every command the parser knows."""
    sys.path.insert(0, str(ROOT))
    from perfbench.cli import command_names

    return [["--help"]] + [[name, "--help"] for name in command_names()]


def time_command(args: list[str], repeats: int) -> list[float]:
    out = []
    for i in range(repeats + 1):
        t = time.perf_counter()
        subprocess.run([*PERFBENCH, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        if i:  # the first run warms the file cache
            out.append(time.perf_counter() - t)
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--source", type=Path, help="copy the runs of this results folder (default: import fixtures)")
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (default: a temporary folder)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="perfbench-cli-"))
    try:
        store = a.keep or tmp / "store"
        if store.exists():
            shutil.rmtree(store)
        build_store(a.source or import_sources(tmp / "src"), store, a.runs)
        print(f"load before: {uptime()}")
        print(f"{'command':<34} {'min':>7} {'median':>7} {'max':>7}  (wall s, {a.repeats} runs, {sys.executable})")
        for args in [*commands(), ["ls", "--results", str(store)], ["ls", "--json", "--results", str(store)]]:
            ts = time_command(args, a.repeats)
            shown = " ".join(x if x != str(store) else f"<{a.runs} runs>" for x in args)
            print(f"perfbench {shown:<24} {min(ts):7.3f} {statistics.median(ts):7.3f} {max(ts):7.3f}")
        print(f"load after:  {uptime()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
