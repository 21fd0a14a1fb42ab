"""What ranking and gains add to `perfbench analyze`, in process: CPU time of
analyzers.analyses.advice.advise() of this checkout vs the one in a baseline checkout (default ../main), on the same
tables of bench_cluster_vs_msprof's synthetic clusters (synth-128, synth-1024), medians of 5 calls each,
against the in-process CPU time of the whole analysis (parsing workers not counted: the share is an upper bound).

    .venv/bin/python bench/bench_advice_cost.py [BASELINE_CHECKOUT]

The baseline's advice runs in a child process whose imports come from the baseline checkout (its advice may be one
module or a package of rule modules), on the tables this checkout's analysis made (pickled).
"""

import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def advise_ms(tables: dict, summary: dict) -> float:
    """Median CPU ms of 5 advise() calls of the checkout this process imports from."""
    from analyzers.analyses.advice import advise

    ts = []
    for _ in range(5):
        t = time.process_time()
        advise(tables, summary)
        ts.append(time.process_time() - t)
    return statistics.median(ts) * 1000


def main() -> None:
    sys.path.insert(0, str(HERE))
    from bench_cluster_vs_msprof import make_synth

    import analyzers

    base = Path(sys.argv[1] if len(sys.argv) > 1 else HERE.parents[1] / "main").resolve()
    for n in (128, 1024):
        with tempfile.TemporaryDirectory() as d:
            make_synth(n, Path(d) / "s")
            t0 = time.process_time()
            a = analyzers.analyze(analyzers.load_profile(Path(d) / "s"))
            total = time.process_time() - t0
            tables = dict(a.tables)
            new_ms = advise_ms(tables, a.summary)
            data = Path(d) / "tables.pkl"
            data.write_bytes(pickle.dumps((tables, a.summary)))
            code = (
                "import pickle, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
                "from bench_advice_cost import advise_ms; print(advise_ms(*pickle.load(open(sys.argv[3], 'rb'))))"
            )
            out = subprocess.run(
                [sys.executable, "-c", code, str(HERE), str(base), str(data)],
                cwd=base,
                capture_output=True,
                text=True,
                check=True,
            )
            old_ms = float(out.stdout.split()[-1])
            print(
                f"synth-{n}: analyze in-process CPU {total:.2f} s; advise() CPU median new {new_ms:.1f} ms, main "
                f"{old_ms:.1f} ms: "
                f"added {new_ms - old_ms:.1f} ms = {(new_ms - old_ms) / 1000 / total:.2%} of analyze; rows "
                f"{len(a.tables['advice'])}",
                flush=True,
            )


if __name__ == "__main__":
    main()
