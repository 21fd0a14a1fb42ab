"""perfbench's breakdown of a folder of Kineto GPU traces beside HolisticTraceAnalysis's, run on the same files.

    .venv/bin/python bench/bench_kineto_hta_parity.py FOLDER

The comparison of tests/golden/test_kineto_hta_parity.py (same window, same definitions: its docstring) on traces
that are not in the shared fixtures, e.g. the ResNet-50 trace bench/gpu_trace_capture.py writes on a GPU machine.
Prints, per rank and part (window, compute, idle, overlapped and exposed communication), both tools' microseconds
and their difference as a share of HTA's value (of the window for a part under 1% of it).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

import analyzers  # noqa: E402
from tests.golden.test_kineto_hta_parity import REL, perfbench_window, run_hta  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__)
        return 2
    folder = Path(argv[0]).resolve()
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as td:
        want = run_hta(folder, Path(td), mp)
    profile = analyzers.load_profile(folder)
    worst = 0.0
    print(f"{'rank':>4} {'part':<10} {'HTA us':>12} {'perfbench us':>13} {'diff':>8}")
    for rank, h in sorted(want.items()):
        got = perfbench_window(profile, rank)
        for part in ("window", "compute", "idle", "overlapped", "exposed"):
            base = max(abs(h[part]), REL * h["window"])
            diff = (got[part] - h[part]) / base if base else 0.0
            worst = max(worst, abs(diff))
            print(f"{rank:>4} {part:<10} {h[part]:>12.1f} {got[part]:>13.1f} {diff * 100:>+7.2f}%")
    print(f"largest difference: {worst * 100:.2f}% ({'within' if worst <= REL else 'OUTSIDE'} {REL * 100:g}%)")
    return 0 if worst <= REL else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
