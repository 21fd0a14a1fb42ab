"""What ranking and gains add to `perfbench analyze`, in process: CPU time of
analyzers.analyses.advice.advise() of this checkout vs the one in a baseline checkout (default ../main), on the same
tables of bench_cluster_vs_msprof's synthetic clusters (synth-128, synth-1024), medians of 5 calls each,
against the in-process CPU time of the whole analysis (parsing workers not counted: the share is an upper bound).

    .venv/bin/python bench/bench_advice_cost.py [BASELINE_CHECKOUT]
"""

import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cluster_vs_msprof import make_synth
import analyzers
from analyzers.analyses.advice import advise

BASE = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "main")
# the baseline's advice module: analyzers/analyses/advice.py, or analyzers/advice.py in checkouts before the layout
OLD = next(p for p in (BASE / "analyzers" / "analyses" / "advice.py", BASE / "analyzers" / "advice.py") if p.exists())
spec = importlib.util.spec_from_file_location("main_advice", str(OLD))
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
for n in (128, 1024):
    with tempfile.TemporaryDirectory() as d:
        make_synth(n, Path(d) / "s")
        t0 = time.process_time()
        a = analyzers.analyze(analyzers.load_profile(Path(d) / "s"))
        total = time.process_time() - t0
        tables = dict(a.tables)
        ts, to = [], []
        for _ in range(5):
            t = time.process_time()
            advise(tables, a.summary)
            ts.append(time.process_time() - t)
            t = time.process_time()
            old.advise(tables, a.summary)
            to.append(time.process_time() - t)
        new_ms, old_ms = statistics.median(ts) * 1000, statistics.median(to) * 1000
        print(
            f"synth-{n}: analyze in-process CPU {total:.2f} s; advise() CPU median new {new_ms:.1f} ms, main "
            f"{old_ms:.1f} ms: "
            f"added {new_ms - old_ms:.1f} ms = {(new_ms - old_ms) / 1000 / total:.2%} of analyze; rows "
            f"{len(a.tables['advice'])}",
            flush=True,
        )
