"""Benchmark: dashboard first paint (targets: < 1 s for 500 runs, < 2 s for 10,000 runs).

    .venv/bin/python bench/bench_dashboard_first_paint.py --sizes 500,10000 --repeats 5 --port 8091

Builds a store of N run records shaped per the run-record contract (docs/architecture.md) with the
Store API — settings grid over world size x fusion x compression x repeats, per-step workload metrics
for every rank, a step breakdown, kernels and collectives — starts `perfbench dashboard` on it in a
subprocess (one server per store size), and loads each page in headless Chromium (Playwright driving
/usr/bin/chromium), timing from navigation start until the frame that paints the page's first content
("paint": the grid's first cell on Sweeps, the verdict on Run, the table on Scaling), recorded in the page
itself (a MutationObserver sees the content enter the DOM, the next requestAnimationFrame is its frame;
Playwright's polled wait, which a busy main thread delays, is reported beside it); and, separately, until
its first chart is drawn ("charts", which waits for plotly.js). "reference" is a page with no data at all (an
unregistered path: Dash's own bootstrap and its 404 heading), measured in the same rounds: the floor for every page.
Only the
last --tables-for runs get analysis tables (the Run page reads one run's tables; writing 40,000 parquet
files would only slow the set-up). The store is synthetic on purpose: this measures the dashboard's cost,
not MindSpore's. Reports medians over repeats (the machine is shared).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.store import Store  # noqa: E402
from tests.ui.test_dashboard_ui import CHROMIUM_ARGS  # noqa: E402  (the browser flags the UI tests run with)


GRID = list(itertools.product([1, 2, 4, 8], [0, 8, 32], ["none", "fp16", "topk"]))


def run_id(i: int) -> str:
    ws, fusion, comp = GRID[i % len(GRID)]
    return f"bench-ws{ws}-f{fusion}-{comp}-r{i // len(GRID)}"


def make_store(
    root: Path, n_runs: int, steps: int = 12, warmup: int = 2, seed: int = 0, tables_for: int | None = None
) -> list[str]:
    """A store of `n_runs` contract-shaped run records, the last `tables_for` (default all) with tables."""
    rng = np.random.default_rng(seed)
    store = Store(root)
    ids = []
    sweep_id = "bench-20261122-000000"
    for i in range(n_runs):
        ws, fusion, comp = GRID[i % len(GRID)]
        rep = i // len(GRID)
        rid = run_id(i)
        base = 0.05 * (1 + 0.1 * np.log2(ws)) * (0.9 if fusion else 1.0) * (0.95 if comp != "none" else 1.0)
        rows = []
        t0 = 1.7e9 + i * 100
        for s in range(steps):
            for r in range(ws):
                st = base * (1 + 0.05 * abs(rng.standard_normal()))
                if s < warmup:
                    st *= 20
                rows.append(
                    {
                        "rank": r,
                        "step": s,
                        "start_ts": t0 + s * base,
                        "end_ts": t0 + s * base + st,
                        "step_time_s": st,
                        "samples": 8,
                        "loss": 2.3 - 0.01 * s,
                        "profiled": warmup <= s < warmup + 4,
                    }
                )
        wsteps = pd.DataFrame(rows)
        with_tables = tables_for is None or i >= n_runs - tables_for
        bd = []
        for s in range(warmup, warmup + 4):
            for r in range(ws):
                step_us = base * 1e6
                comp_us = step_us * 0.6
                comm = step_us * 0.3
                bd.append(
                    {
                        "rank": r,
                        "step": s,
                        "step_us": step_us,
                        "computing_us": comp_us,
                        "communication_us": comm,
                        "communication_not_overlapped_us": comm * 0.8,
                        "overlapped_us": comm * 0.2,
                        "free_us": step_us - comp_us - comm * 0.8,
                        "preparing_us": 0.0,
                        "bubble_us": np.nan,
                        "stage_us": np.nan,
                    }
                )
        kernels = pd.DataFrame(
            {
                "name": [f"Conv2D-op{k}" for k in range(20)],
                "type": ["Conv2D"] * 20,
                "count": [4 * ws] * 20,
                "total_us": rng.uniform(100, 5000, 20),
            }
        )
        comm_ops = pd.DataFrame(
            [
                {
                    "rank": r,
                    "step": s,
                    "op_name": f"AllReduce-op{k}",
                    "op_type": "allreduce",
                    "group": "",
                    "group_size": ws,
                    "start_us": 0.0,
                    "elapse_ms": 1.5,
                    "transit_ms": 1.0,
                    "wait_ms": 0.5,
                    "size_bytes": 4e6,
                    "algbw_gbps": 2.6,
                    "busbw_gbps": 2.6 * 2 * (ws - 1) / ws,
                }
                for s in range(warmup, warmup + 4)
                for r in range(ws)
                for k in range(3)
            ]
        )
        if with_tables:
            store.write_table(rid, "workload_steps", wsteps)
            store.write_table(rid, "step_breakdown", pd.DataFrame(bd))
            store.write_table(rid, "kernels", kernels)
            store.write_table(rid, "comm_ops", comm_ops)
            store.write_table(
                rid,
                "advice",
                pd.DataFrame(
                    [
                        {
                            "rule": "exposed_comm",
                            "severity": "medium",
                            "message": "24% of step time is communication not hidden behind compute",
                            "evidence": "step_breakdown: communication_not_overlapped_us / step_us",
                        }
                    ]
                ),
            )
        steady = wsteps[wsteps.step >= warmup].groupby("step")
        st = float(steady.step_time_s.max().median())
        store.write_run(
            {
                "run_id": rid,
                "sweep_id": sweep_id,
                "source": "sweep",
                "status": "ok",
                "error": None,
                "settings": {
                    "workload": "resnet50",
                    "world_size": ws,
                    "repeat": rep,
                    "parallel.comm_fusion": fusion,
                    "parallel.grad_compression": comp,
                },
                "config": {
                    "run_id": rid,
                    "workload": "resnet50",
                    "world_size": ws,
                    "repeat": rep,
                    "train": {"batch_size": 8, "steps": steps, "warmup_steps": warmup},
                    "parallel": {"comm_fusion": fusion, "grad_compression": comp},
                },
                "env": {"perfbench": "0.1.0", "mindspore": "2.10.0", "cpus": 2},
                "timings": {"started": t0, "finished": t0 + 60, "wall_s": 60.0},
                "metrics": {
                    "throughput": 8 * ws / st,
                    "step_time_s": st,
                    "computing_s": base * 0.6,
                    "communication_s": base * 0.3,
                    "communication_not_overlapped_s": base * 0.24,
                    "overlapped_s": base * 0.06,
                    "free_s": base * 0.16,
                    "comm_share": 0.3,
                    "kernel_utilization": 0.6,
                    "collectives_per_step": 3,
                    "comm_bytes_per_step": 1.2e7,
                    "bubble_fraction": None,
                    "expert_load_cv": None,
                },
            }
        )
        ids.append(rid)
    store.write_sweep({"sweep_id": sweep_id, "config": {}, "run_ids": ids})
    return ids


# Playwright's wait_for_selector polls (at growing intervals), so when the main thread is busy right after
# the content appears (e.g. evaluating plotly.js for the charts) it can see the content seconds late. This
# init script records, in the page itself, when the selector first matches (a MutationObserver, called as
# the DOM changes) and the frame that paints it (the next requestAnimationFrame), in ms from navigation start.
OBSERVE = """
window.__pbFrame = null;
(function () {
  var sel = %s, done = false;
  function check() {
    if (!done && document.querySelector(sel)) {
      done = true; obs.disconnect();
      requestAnimationFrame(function () { window.__pbFrame = performance.now(); });
    }
  }
  var obs = new MutationObserver(check);
  obs.observe(document, {childList: true, subtree: true});
})();
"""


def wait_http(url: str, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"dashboard did not answer at {url} within {timeout}s")


def start_server(results: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "perfbench", "dashboard", "--results", str(results), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="500,10000", help="store sizes (runs), comma-separated")
    ap.add_argument("--tables-for", type=int, default=20, help="runs (the last ones) that get analysis tables")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--port", type=int, default=8091, help="port of the first store's server (next: port+1, ...)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--stores",
        type=Path,
        default=None,
        help="keep the stores here (results-N); an existing one is reused instead of rebuilt",
    )
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tmp = tempfile.TemporaryDirectory(prefix="perfbench-bench-")
    sizes = [int(x) for x in args.sizes.split(",")]
    stores, ids, procs = {}, {}, {}
    for i, n in enumerate(sizes):
        t = time.perf_counter()
        stores[n] = (args.stores or Path(tmp.name)) / f"results-{n}"
        if (stores[n] / "runs").is_dir() and len(os.listdir(stores[n] / "runs")) == n:
            ids[n] = [run_id(i) for i in range(n)]
        else:
            ids[n] = make_store(stores[n], n, tables_for=args.tables_for)
        print(f"store: {n} runs (built in {time.perf_counter() - t:.1f}s)", flush=True)
        procs[n] = (start_server(stores[n], args.port + i), f"http://127.0.0.1:{args.port + i}")
    # (path, selector of the first content, selector of the first chart or None)
    pages = {
        "reference": ("/__empty__", "#_pages_content h1", None),
        "sweeps": ("/", "#runs-grid .dash-spreadsheet td", "#sweeps-heatmap .main-svg"),
        "run": (None, "#run-verdict", "#run-breakdown .main-svg"),
        "scaling": ("/scaling", "#scaling-table td", "#scaling-throughput .main-svg"),
    }
    times: dict[tuple, list[float]] = {}
    try:
        for n, (_, base) in procs.items():
            t = time.perf_counter()
            wait_http(base + "/", 300)
            print(f"server for {n} runs up in {time.perf_counter() - t:.1f}s", flush=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, headless=True)
            for rep in range(args.repeats + 1):  # round 0 warms the server's caches and the browser; not counted
                for name, (path, sel, chart) in pages.items():
                    for n, (_, base) in procs.items():  # side by side: same page, every store, back to back
                        page = browser.new_page()  # a fresh page: nothing cached in the page itself
                        page.add_init_script(OBSERVE % json.dumps(sel))
                        t = time.perf_counter()
                        page.goto(base + (path or f"/run/{ids[n][-1]}"), wait_until="commit")
                        page.wait_for_selector(sel, timeout=120000)
                        dt = time.perf_counter() - t
                        page.wait_for_function("window.__pbFrame !== null", timeout=120000)
                        seen = page.evaluate("window.__pbFrame") / 1000.0  # in-page, from navigation start
                        dc = None
                        if chart:
                            page.wait_for_selector(chart, timeout=120000)
                            dc = time.perf_counter() - t
                        page.close()
                        if rep:
                            times.setdefault((name, n, "paint"), []).append(dt)
                            times.setdefault((name, n, "observed"), []).append(seen)
                            if dc is not None:
                                times.setdefault((name, n, "charts"), []).append(dc)
            browser.close()
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    load = os.getloadavg()
    med = statistics.median
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (2 cores)")
    print(
        "| page | "
        + " | ".join(f"{n} runs: paint s (min–max) | {n} runs: seen by polling s | {n} runs: charts s" for n in sizes)
        + " | "
        + " | ".join(f"paint / reference ({n})" for n in sizes)
        + " |"
    )
    print("|---" * (1 + 4 * len(sizes)) + "|")
    out = {}
    for name in pages:
        cells, ratios = [], []
        for n in sizes:
            v = times[(name, n, "observed")]  # the frame that paints the content, recorded in the page
            polled = times[(name, n, "paint")]
            ref = med(times[("reference", n, "observed")])
            c = times.get((name, n, "charts"))
            cells.append(f"{med(v):.2f} ({min(v):.2f}–{max(v):.2f})")
            cells.append(f"{med(polled):.2f}")
            cells.append(f"{med(c):.2f}" if c else "–")
            ratios.append(f"{med(v) / ref:.2f}")
            out[f"{name}@{n}"] = {
                "paint_median_s": med(v),
                "paint_min_s": min(v),
                "paint_max_s": max(v),
                "n": len(v),
                "polled_median_s": med(polled),
                "charts_median_s": med(c) if c else None,
                "reference_median_s": ref,
            }
        print(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    res = {"command": "python " + " ".join(sys.argv), "first_paint": out, "load": load}
    print(json.dumps(res, indent=1))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
