"""Where `perfbench analyze DATA` spends its wall time, phase by phase, in one process (`--workers 1`, so that
the per-file timers see every read): interpreter start to the first import, imports, finding the ranks, reading
each kind of rank file, merging, the analyses, the JSON document, the store write.

Usage:
  .venv/bin/python bench/phases_analyze.py DATA [--results DIR]

Each read is timed by wrapping the reader functions (a few µs per call), so the figures add up to the total
within the timer's own cost. Prints one line per phase: wall seconds and share.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    spent: dict[str, float] = defaultdict(float)
    t = time.perf_counter()
    import analyzers
    import analyzers.parsers.ascend.text as atext
    import analyzers.parsers.load as aload
    from analyzers.report import build_document, dumps
    from perfbench.run.ingest import store_analysis
    from perfbench.store import Store

    spent["imports"] = time.perf_counter() - t

    def timed(mod, name: str, label: str) -> None:
        f = getattr(mod, name)

        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[label] += time.perf_counter() - t0

        setattr(mod, name, wrapper)

    timed(aload, "find_units", "find the ranks")
    timed(atext, "read_text_memory", "read the memory files (summary mode: memory_record.csv)")
    timed(atext, "rank_summary", "reduce a rank's memory columns to its peaks")
    timed(atext, "trace_facts", "trace_view.json (sample ranks: collective sizes)")
    timed(atext, "_step_trace", "step_trace_time.csv")
    timed(atext, "_communication", "communication.json")
    timed(atext, "_matrix", "communication_matrix.json")
    timed(atext, "rank_info", "profiler_info / profiler_metadata")
    timed(aload, "merge_profiles", "merge the ranks' tables")
    t = time.perf_counter()
    profile = analyzers.load_profile(args.data, workers=1, detail="auto", kernels="auto")
    spent["load_profile (all of it)"] = time.perf_counter() - t
    with tempfile.TemporaryDirectory(prefix="scale-phases-") as tmp:
        store = Store(args.results or Path(tmp))
        store.reset_run("phases")
        t = time.perf_counter()
        analysis = store_analysis(store, "phases", profile, None, None, None)
        spent["analyses + store write"] = time.perf_counter() - t
        t = time.perf_counter()
        doc = build_document(profile, analysis)
        spent["JSON document"] = time.perf_counter() - t
        t = time.perf_counter()
        dumps(doc)
        spent["JSON text"] = time.perf_counter() - t
    total = time.perf_counter() - T_START
    print(f"{args.data}: {total:.2f} s in this process (interpreter start not included)")
    for k, v in spent.items():
        print(f"  {k:55s} {v:6.2f} s  {v / total:5.1%}")


if __name__ == "__main__":
    main()
