"""Side-by-side: `msprof-analyze cluster` vs `perfbench analyze` on the same Ascend profiler data.

Both run as fresh processes (interpreter start and imports included, as a user would run them), in
alternating order, `--repeats` times each: `msprof-analyze cluster -d DATA -m all -o OUT` and
`perfbench analyze DATA --results RES --json` (default `--kernels auto`: the profiler's step trace is
the breakdown, the kernels of the first and last rank its cross-check). The report gives medians of wall time, of
CPU time (user + sys of the process and its worker processes, which does not depend on how loaded the
shared machine is) and of peak memory (max RSS of the main process, from wait4; worker processes not
included), and the ratios msprof / perfbench.

Data sets (copied into a temp dir, never into the repo):
  b-level1   fixture set B level1: 2 ranks, torch_npu text export with communication data
  b-level2   fixture set B level2
  synth-N    N ranks made from set B level1's two real ranks (rank_id rewritten in profiler_info_*.json),
             to show how both tools scale with rank count (e.g. synth-16, synth-128)

Usage:
  .venv/bin/python bench/bench_cluster_vs_msprof.py [--sets b-level1,synth-16,synth-128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT.parent / "shared" / "fixtures" / "ascend" / "Ascend__msinsight" / "test" / "data" / "pytorch" / "text"
PY = Path(sys.executable)
MSPROF = PY.with_name("msprof-analyze")


def make_set(name: str, tmp: Path) -> Path:
    dst = tmp / name
    if name.startswith("b-level"):
        shutil.copytree(FIX / name.split("-", 1)[1], dst)
        return dst
    if name.startswith("synth-"):
        n = int(name.split("-")[1])
        dst.mkdir()
        for r in range(n):
            src = FIX / "level1" / f"rank{r % 2}_ascend_pt"
            d = dst / f"rank{r}_ascend_pt"
            shutil.copytree(src, d, ignore=shutil.ignore_patterns("profiler_info_*.json"))
            info = json.loads((src / f"profiler_info_{r % 2}.json").read_text())
            info["rank_id"] = r
            (d / f"profiler_info_{r}.json").write_text(json.dumps(info))
        return dst
    raise SystemExit(f"unknown set {name}")


def timed(cmd: list[str], timeout: float = 900) -> tuple[float, float, float]:
    """(wall s, CPU s of the process and all its waited-for children: user + sys, peak RSS MB of the main
    process)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT)  # `-m perfbench`: this checkout's code
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t
        rc = os.waitstatus_to_exitcode(status)
        if rc != 0:
            out.seek(0)
            err.seek(0)
            raise SystemExit(f"failed ({rc}): {' '.join(cmd)}\n{out.read()[-1500:]}\n{err.read()[-1500:]}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), ru.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="b-level1,synth-16,synth-128")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfbench-cluster-vs-msprof-") as tmpd:
        tmp = Path(tmpd)
        for name in args.sets.split(","):
            data = make_set(name, tmp)
            ms, pb = [], []
            for i in range(args.repeats):
                out = tmp / f"msprof-out-{name}-{i}"
                res = tmp / f"pb-res-{name}-{i}"
                order = [("m", [str(MSPROF), "cluster", "-d", str(data), "-m", "all", "-o", str(out)]),
                         ("p", [str(PY), "-m", "perfbench", "analyze", str(data), "--results", str(res), "--json"])]
                if i % 2:
                    order.reverse()
                for who, cmd in order:
                    (ms if who == "m" else pb).append(timed(cmd))
                shutil.rmtree(out, ignore_errors=True)
                shutil.rmtree(res, ignore_errors=True)
            m, p = statistics.median(x[0] for x in ms), statistics.median(x[0] for x in pb)
            mc, pc = statistics.median(x[1] for x in ms), statistics.median(x[1] for x in pb)
            mm, pm = statistics.median(x[2] for x in ms), statistics.median(x[2] for x in pb)
            rows.append((name, m, p, mc, pc, mm, pm))
            print(f"{name}: msprof-analyze cluster wall {['%.2f' % x[0] for x in ms]} cpu {['%.2f' % x[1] for x in ms]}; "
                  f"perfbench analyze wall {['%.2f' % x[0] for x in pb]} cpu {['%.2f' % x[1] for x in pb]}; "
                  f"median ratio wall {m / p:.1f}x cpu {mc / pc:.1f}x (load average {os.getloadavg()[0]:.1f})",
                  flush=True)
            shutil.rmtree(data, ignore_errors=True)
    print("\n| data | ranks | msprof-analyze cluster -m all: median wall / CPU (s) / peak MB | perfbench analyze: "
          "median wall / CPU (s) / peak MB | ratio wall | ratio CPU |")
    print("|---|---|---|---|---|---|")
    for name, m, p, mc, pc, mm, pm in rows:
        ranks = name.split("-")[1] if name.startswith("synth") else "2"
        print(f"| {name} | {ranks} | {m:.2f} / {mc:.2f} / {mm:.0f} | {p:.2f} / {pc:.2f} / {pm:.0f} | {m / p:.1f}x "
              f"| {mc / pc:.1f}x |")


if __name__ == "__main__":
    main()
