"""How long a 2-rank msrun launch takes to join MindSpore's cluster, pinned and not.

Each launch is real: `msrun --worker_num=2 --local_worker_num=2 ... --bind_core=True` (every rank pinned to its
core with taskset, as perfbench launches it) running a script that imports MindSpore and calls
`mindspore.communication.init()`, nothing else. Three ways, interleaved round by round so every way sees the
same stretch of the machine:

  pinned     the rank joins on its one core (perfbench before workloads/pinning.py);
  widened    the rank joins on its parent's CPUs and is pinned back after (workloads/pinning.widened_for_join);
  widened+hb the same, with the heartbeat every second (MS_RETRY_INTERVAL_LOWER/UPPER=1, what perfbench's
             launcher now sets): a worker learns the cluster is complete from its next heartbeat.

Reports, per way, the median and range of each rank's `init()` time and of the launch's wall time, plus how
often a rank's registration failed and was retried (MindSpore's log: "Failed to connect to the meta server").

    .venv/bin/python bench/bench_cluster_join.py --rounds 5 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.run.launcher import free_port  # noqa: E402

SCRIPT = """
import json, os, time
t0 = time.time()
import mindspore as ms
ms.set_device("CPU")
from mindspore.communication import init, get_rank
from workloads.pinning import widened_for_join
t1 = time.time()
if os.environ.get("JOIN_WIDENED") == "1":
    with widened_for_join():
        init()
else:
    init()
t2 = time.time()
if os.environ.get("MS_ROLE") != "MS_SCHED":
    print("JOIN " + json.dumps({"rank": get_rank(), "init_s": t2 - t1,
                                "pinned_after": sorted(os.sched_getaffinity(0))}), flush=True)
"""

WAYS = {
    "pinned": {"JOIN_WIDENED": "0"},
    "widened": {"JOIN_WIDENED": "1"},
    "widened+hb": {"JOIN_WIDENED": "1", "MS_RETRY_INTERVAL_LOWER": "1", "MS_RETRY_INTERVAL_UPPER": "1"},
}


def launch(work: Path, way: str, rnd: int) -> dict:
    d = work / f"{way}-{rnd}"
    d.mkdir(parents=True)
    script = work / "join.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_RETRY_INTERVAL")}
    env.update(WAYS[way])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("GLOG_v", "2")
    cmd = [
        str(Path(sys.executable).parent / "msrun"),
        "--worker_num=2",
        "--local_worker_num=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        f"--log_dir={d}",
        "--join=True",
        "--bind_core=True",
        "--cluster_time_out=300",
        str(script),
    ]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    wall = time.time() - t0
    ranks, retries = [], 0
    for w in sorted(d.glob("worker_*.log")):
        text = w.read_text(errors="replace")
        retries += text.count("Failed to connect to the meta server")
        for line in text.splitlines():
            if line.startswith("JOIN "):
                ranks.append(json.loads(line[5:]))
    return {
        "way": way,
        "round": rnd,
        "ok": p.returncode == 0 and len(ranks) == 2,
        "wall_s": round(wall, 2),
        "init_s": [round(r["init_s"], 2) for r in ranks],
        "retries": retries,
        "pinned_after": [r["pinned_after"] for r in ranks],
    }


def summary(rows: list[dict]) -> dict:
    out = {}
    for way in WAYS:
        rs = [r for r in rows if r["way"] == way and r["ok"]]
        inits = [x for r in rs for x in r["init_s"]]
        walls = [r["wall_s"] for r in rs]
        out[way] = {
            "launches": len(rs),
            "failed": sum(1 for r in rows if r["way"] == way and not r["ok"]),
            "init_median_s": round(statistics.median(inits), 2) if inits else None,
            "init_range_s": [min(inits), max(inits)] if inits else None,
            "wall_median_s": round(statistics.median(walls), 2) if walls else None,
            "wall_range_s": [min(walls), max(walls)] if walls else None,
            "retries_median": statistics.median([r["retries"] for r in rs]) if rs else None,
        }
    base = out["pinned"]["wall_median_s"]
    for way in WAYS:
        w = out[way]["wall_median_s"]
        out[way]["wall_vs_pinned"] = round(w / base, 3) if w and base else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pb-join-") as tmp:
        work = Path(tmp)
        (work / "join.py").write_text(SCRIPT)
        for rnd in range(args.rounds):
            for way in WAYS:
                row = launch(work, way, rnd)
                rows.append(row)
                print(
                    f"round {rnd} {way:11s} wall {row['wall_s']:6.2f} s  init {row['init_s']}  "
                    f"retries {row['retries']}  ok {row['ok']}",
                    file=sys.stderr,
                    flush=True,
                )
    res = {"rounds": args.rounds, "load_avg_1min": round(os.getloadavg()[0], 2), "ways": summary(rows), "runs": rows}
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for way, s in res["ways"].items():
            print(
                f"{way:11s} init median {s['init_median_s']} s range {s['init_range_s']}  wall median "
                f"{s['wall_median_s']} s range {s['wall_range_s']} ({s['wall_vs_pinned']}x pinned)  "
                f"retries median {s['retries_median']}  failed {s['failed']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
