"""Benchmark: CLI start-up (targets: `perfbench --help` and every `perfbench COMMAND --help` < 0.3 s,
`perfbench ls` on 500 stored runs < 0.6 s).

    .venv/bin/python bench/bench_cli_startup.py --runs 500 --repeats 7 [--source RESULTS] [--keep DIR] \
        [--baseline OTHER_CHECKOUT/.venv/bin/perfbench]

Builds a store of `--runs` runs by copying real runs: by default it imports set B level1 and level2 (text
export) and set C level1 (`.db` export) from /work/shared/fixtures with `perfbench analyze` (three real
imports, each with its run record and its ~30 analysis tables); `--source RESULTS` copies the runs of an
existing results folder instead (e.g. a real sweep's). Copy i gets the run id `<id>-c<i>` and sweep id
`copies-<i // 10>`; its tables are hard links to the original's (same bytes on disk, no extra space).
Then it times each command as a whole process (interpreter start included), `--repeats` times after one
warm-up run, and prints min / median / max wall seconds and the median CPU seconds (user + system);
quote the medians. `--baseline EXE` times another perfbench the same way, each run in turn with this one's
(A B A B ...), so both see the same load. The load (`uptime`) is printed
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
import resource
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


def time_command(exe: list[str], args: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the operating system's accounting of the finished child) of
    one run: on a loaded machine the CPU time is what the command itself costs, the wall time adds the wait."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([*exe, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def time_in_turn(args: list[str], repeats: int, exes: list[list[str]]) -> list[tuple[list[float], list[float]]]:
    """(wall, cpu) lists per perfbench in `exes`, run in turn (A B A B ...) after one warm-up run each (it warms
    the file cache)."""
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in exes]
    for i in range(repeats + 1):
        for exe, (wall, cpu) in zip(exes, out):
            w, c = time_command(exe, args)
            if i:
                wall.append(w)
                cpu.append(c)
    return out


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--source", type=Path, help="copy the runs of this results folder (default: import fixtures)")
    ap.add_argument("--keep", type=Path, help="build the store here and keep it (default: a temporary folder)")
    ap.add_argument("--baseline", metavar="EXE", help="also time this perfbench (e.g. another checkout's), in turn")
    a = ap.parse_args()
    exes = [PERFBENCH] + ([[a.baseline]] if a.baseline else [])
    tmp = Path(tempfile.mkdtemp(prefix="perfbench-cli-"))
    try:
        store = a.keep or tmp / "store"
        if store.exists():
            shutil.rmtree(store)
        build_store(a.source or import_sources(tmp / "src"), store, a.runs)
        print(f"load before: {uptime()}")
        print(
            f"{'command':<34} {'wall s: min':>11} {'median':>7} {'max':>7}   {'cpu s: median':>13}   ({a.repeats} runs)"
        )
        for args in [*commands(), ["ls", "--results", str(store)], ["ls", "--json", "--results", str(store)]]:
            shown = " ".join(x if x != str(store) else f"<{a.runs} runs>" for x in args)
            for label, (wall, cpu) in zip(("", "   baseline"), time_in_turn(args, a.repeats, exes)):
                print(
                    f"perfbench {shown:<24} {min(wall):11.3f} {statistics.median(wall):7.3f} {max(wall):7.3f}"
                    f"   {statistics.median(cpu):13.3f}{label}"
                )
        print(f"load after:  {uptime()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
