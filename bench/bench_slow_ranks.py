"""Benchmark: find_slow_ranks / find_slow_links on synthetic clusters of growing size.

    .venv/bin/python bench/bench_slow_ranks.py [--ranks 64,512,2048] [--ops 40] [--steps 4] [--repeat 3]

Each configuration: `ranks` ranks in data-parallel groups of 8 plus one world group, `ops` collectives
per step, one planted slow rank. Prints the median wall time of `repeat` runs, the peak RSS growth
and whether the planted rank was found (the benchmark fails loudly if it is not).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd
import psutil

from analyzers.analyses.slow_ranks import find_slow_links, find_slow_ranks


def make_comm_ops(ranks: int, ops: int, steps: int, slow: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for group, members in [("world", list(range(ranks)))] + [
        (f"dp{g}", list(range(g * 8, min(g * 8 + 8, ranks)))) for g in range(ranks // 8)
    ]:
        n = len(members)
        for step in range(steps):
            for k in range(ops):
                wait = rng.uniform(4.0, 6.0, n)
                if slow in members:
                    wait[members.index(slow)] = 0.0
                rows.append(
                    pd.DataFrame(
                        {
                            "rank": members,
                            "step": step,
                            "op_name": f"{group}_ar{k}",
                            "group": group,
                            "wait_ms": wait,
                            "transit_ms": 1.0,
                            "elapse_ms": wait + 1.0,
                        }
                    )
                )
    return pd.concat(rows, ignore_index=True)


def make_links(ranks: int, steps: int, slow_src: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(ranks), steps)
    t = rng.uniform(4.0, 5.0, len(src))
    t[src == slow_src] *= 4
    return pd.DataFrame(
        {
            "step": np.tile(np.arange(steps), ranks),
            "op_name": "ar",
            "group": "world",
            "src": src,
            "dst": (src + 1) % ranks,
            "transport": "RDMA",
            "size_mb": 100.0,
            "time_ms": t,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="64,512,2048")
    ap.add_argument("--ops", type=int, default=40)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    proc = psutil.Process()
    print(f"{'ranks':>6} {'rows':>9} {'slow_ranks_s':>13} {'slow_links_s':>13} {'rss_MB':>7} found")
    for n in [int(x) for x in a.ranks.split(",")]:
        slow = n // 3
        co = make_comm_ops(n, a.ops, a.steps, slow)
        lk = make_links(n, a.steps, slow)
        rss0 = proc.memory_info().rss
        t_sr, t_sl = [], []
        for _ in range(a.repeat):
            t = time.perf_counter()
            res = find_slow_ranks(co)
            t_sr.append(time.perf_counter() - t)
            t = time.perf_counter()
            sl = find_slow_links(lk, None)
            t_sl.append(time.perf_counter() - t)
        rss = (proc.memory_info().rss - rss0) / 1e6
        g = res[(res["scope"] == "group") & res["slow"]]
        found = set(g["rank"]) == {slow} and list(sl[sl["slow"]]["src"]) == [slow]
        print(
            f"{n:>6} {len(co):>9} {statistics.median(t_sr):>13.3f} {statistics.median(t_sl):>13.3f} {rss:>7.0f} {found}"
        )
        if not found:
            raise SystemExit(f"planted slow rank {slow} not found: {sorted(set(g['rank']))}")


if __name__ == "__main__":
    main()
