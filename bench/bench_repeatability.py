"""Repeatability of one configuration: the same settings run again and again, how far do the numbers move?

1. Back to back: the configuration `--runs` times in a row (one sweep, `repeats: N` of one point).
2. Interleaved: the same configuration alternating with another one (`--other KEY=VALUE`, default world_size=1),
   `--runs` times each (one sweep of the two points; repeats are the outer loop, so A B A B ...).

For each set: per run the median step time, the median CPU time per step (`step_cpu_s`, the slowest rank's
process CPU time) and the steadiness record (analyzers.analyses.steadiness: step-time CV within the run, warm-up drift,
ranks' CPU spread); over the runs the coefficient of variation (sample sd / mean) of the per-run medians.
While the runs train, a sampler reads every rank's threads from /proc/<pid>/task/*/stat every `--every` s (CPU
time utime+stime, the core each thread last ran on, its name) and /proc/<pid>/task/*/status (allowed CPUs), and
the bench reports per rank and thread name: threads, CPU seconds, cores used, allowed CPUs — where a rank's CPU
time goes, and whether its threads share one pinned core. The 1-minute load average is sampled too.

    .venv/bin/python bench/bench_repeatability.py --config examples/quickstart.yaml --world-size 2 --runs 10
    .venv/bin/python bench/bench_repeatability.py --runs 3 --steps 20 --json /tmp/rep.json     # a small version

Results in docs/benchmarks.md ("Repeatability").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfbench.regress.compare import step_samples  # noqa: E402
from perfbench.store import Store  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cv(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) >= 2 and statistics.mean(xs) > 0 else None


class ThreadSampler(threading.Thread):
    """Every `every` s: the threads of processes whose command line names `marker` (the ranks of our runs)."""

    def __init__(self, marker: str, every: float = 2.0):
        super().__init__(daemon=True)
        self.marker, self.every, self.stop = marker, every, threading.Event()
        self.threads: dict[tuple[int, int], dict] = {}  # (pid, tid) -> last sample
        self.procs: dict[int, dict] = {}
        self.load: list[float] = []

    def _scan(self):
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if self.marker not in cmd or "entry.py" not in cmd:
                    continue
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                role = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"MS_ROLE=")), None)
                node = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"MS_NODE_ID=")), None)
                if role == "MS_SCHED":
                    continue
                run = next((p for p in cmd.split() if p.endswith("run_config.json")), "?")
                self.procs[pid] = {"rank": node, "run_config": run}
                for t in os.listdir(f"/proc/{pid}/task"):
                    stat = Path(f"/proc/{pid}/task/{t}/stat").read_text()
                    name = stat[stat.index("(") + 1 : stat.rindex(")")]
                    f = stat[stat.rindex(")") + 2 :].split()
                    cpu_s = (int(f[11]) + int(f[12])) / CLK  # utime, stime (fields 14, 15)
                    core = int(f[36])  # field 39: the CPU it last ran on
                    allowed = next(
                        (
                            ln.split(":", 1)[1].strip()
                            for ln in Path(f"/proc/{pid}/task/{t}/status").read_text().splitlines()
                            if ln.startswith("Cpus_allowed_list")
                        ),
                        "?",
                    )
                    s = self.threads.setdefault((pid, int(t)), {"name": name, "cores": set()})
                    s.update(cpu_s=cpu_s, allowed=allowed, name=name)
                    s["cores"].add(core)
            except (OSError, ValueError, IndexError):
                continue

    def run(self):
        while not self.stop.is_set():
            self.load.append(os.getloadavg()[0])
            self._scan()
            self.stop.wait(self.every)

    def summary(self) -> list[dict]:
        """Per rank process and thread name (digits stripped): threads, CPU s, cores seen, allowed CPUs."""
        import re

        groups: dict[tuple, dict] = {}
        for (pid, _tid), s in self.threads.items():
            key = (pid, re.sub(r"\d+$", "", s["name"]) or s["name"])
            g = groups.setdefault(
                key,
                {
                    "pid": pid,
                    "rank": self.procs.get(pid, {}).get("rank"),
                    "run_config": self.procs.get(pid, {}).get("run_config"),
                    "thread": key[1],
                    "threads": 0,
                    "cpu_s": 0.0,
                    "cores": set(),
                    "allowed": set(),
                },
            )
            g["threads"] += 1
            g["cpu_s"] += s["cpu_s"]
            g["cores"] |= s["cores"]
            g["allowed"].add(s["allowed"])
        out = []
        for g in groups.values():
            out.append(dict(g, cpu_s=round(g["cpu_s"], 2), cores=sorted(g["cores"]), allowed=sorted(g["allowed"])))
        return sorted(out, key=lambda g: (g["pid"], -g["cpu_s"]))


def sweep_config(
    base: dict, name: str, world_size: int, other: tuple[str, object] | None, runs: int, steps: int | None
) -> dict:
    cfg = json.loads(json.dumps(base))
    cfg["name"] = name
    cfg["repeats"] = runs
    cfg.setdefault("profile", {})["enabled"] = False
    if steps:
        cfg.setdefault("train", {})["steps"] = steps
    axes = {"world_size": [world_size]}
    if other:
        k, v = other
        if k == "world_size":
            axes["world_size"] = [world_size, v]
        else:
            cur = (cfg.get(k.split(".")[0]) or {}).get(k.split(".")[-1]) if "." in k else None
            axes[k.split(".")[-1]] = [cur, v]
    cfg["sweep"] = axes
    return cfg


def measure(store: Store, sweep_id: str, world_size: int) -> dict:
    runs = sorted(
        [r for r in store.list_runs() if r.get("sweep_id") == sweep_id],
        key=lambda r: (r.get("timings") or {}).get("started") or 0,
    )
    rows = []
    for r in runs:
        m = r.get("metrics") or {}
        s = step_samples(store, r) if r.get("status") == "ok" else {}
        rows.append(
            {
                "run_id": r["run_id"],
                "status": r.get("status"),
                "settings": r.get("settings"),
                "step_time_s": m.get("step_time_s"),
                "step_cpu_s": m.get("step_cpu_s"),
                "step_time_p10": sorted(s["step_time_s"])[len(s["step_time_s"]) // 10]
                if s.get("step_time_s")
                else None,
                **{k: m.get(k) for k in ("step_time_cv", "warmup_drift", "warmup_drift_p", "rank_cpu_spread")},
                "wall_s": (r.get("launch") or {}).get("wall_s"),
            }
        )
    mine = [x for x in rows if x["status"] == "ok" and (x["settings"] or {}).get("world_size") == world_size]
    return {
        "runs": rows,
        "target_runs": len(mine),
        "cv_step_time": cv([x["step_time_s"] for x in mine]),
        "cv_step_cpu": cv([x["step_cpu_s"] for x in mine]),
        "step_time_s": [x["step_time_s"] for x in mine],
        "step_cpu_s": [x["step_cpu_s"] for x in mine],
    }


def run_set(results: Path, cfg: dict, env: dict, every: float) -> tuple[str, float, list, list]:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"{cfg['name']}.yaml"
        p.write_text(yaml.safe_dump(cfg))
        sampler = ThreadSampler(str(results), every)
        sampler.start()
        t0 = time.time()
        subprocess.run(
            [sys.executable, "-m", "perfbench", "sweep", str(p), "--results", str(results)],
            cwd=ROOT,
            env=env,
            check=False,
        )
        wall = time.time() - t0
        sampler.stop.set()
        sampler.join()
    store = Store(results, create=False)
    sweep = max((s for s in store.list_sweeps() if s.get("name") == cfg["name"]), key=lambda s: s.get("created", 0))
    return sweep["sweep_id"], wall, sampler.summary(), sampler.load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "examples" / "quickstart.yaml"))
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10, help="runs per set (default 10)")
    ap.add_argument("--steps", type=int, help="override train.steps (default: the config's)")
    ap.add_argument("--other", default="world_size=1", help="the configuration interleaved with it (KEY=VALUE)")
    ap.add_argument("--sets", default="back-to-back,interleaved")
    ap.add_argument("--every", type=float, default=2.0, help="thread sampling period, s")
    ap.add_argument("--results", type=Path, help="keep the runs here (default: a temporary folder)")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra environment for the runs (e.g. PERFBENCH_WARM_MSRUN=0)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    base = yaml.safe_load(Path(args.config).read_text())
    k, v = args.other.split("=", 1)
    other = (k, yaml.safe_load(v))
    env = dict(os.environ, **dict(e.split("=", 1) for e in args.env))
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    tmp = None
    if args.results is None:
        tmp = tempfile.TemporaryDirectory()
        args.results = Path(tmp.name)
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "config": args.config,
        "world_size": args.world_size,
        "runs": args.runs,
        "env": args.env,
        "sets": {},
    }
    for name in args.sets.split(","):
        cfg = sweep_config(
            base, f"rep-{name}", args.world_size, other if name == "interleaved" else None, args.runs, args.steps
        )
        sid, wall, threads, load = run_set(args.results, cfg, env, args.every)
        res = measure(Store(args.results, create=False), sid, args.world_size)
        res.update(
            sweep_id=sid,
            wall_s=round(wall, 1),
            threads=threads,
            load=[min(load), statistics.median(load), max(load)] if load else None,
        )
        out["sets"][name] = res
        print(f"\n== {name} ({sid}, {wall:.0f} s, load {res['load']}) ==")
        print(
            f"{'run':48s} {'ws':>3s} {'step ms':>8s} {'cpu ms':>8s} {'p10 ms':>8s} {'cv%':>5s} {'drift%':>7s} "
            f"{'rank spread%':>12s}"
        )
        for r in res["runs"]:
            f = lambda x, s=1000: "-" if x is None else f"{x * s:.1f}"  # noqa: E731
            print(
                f"{r['run_id'][-48:]:48s} {str((r['settings'] or {}).get('world_size')):>3s} {f(r['step_time_s']):>8s} "
                f"{f(r['step_cpu_s']):>8s} {f(r['step_time_p10']):>8s} {f(r['step_time_cv'], 100):>5s} "
                f"{f(r['warmup_drift'], 100):>7s} {f(r['rank_cpu_spread'], 100):>12s}"
            )
        pc = lambda x: "-" if x is None else f"{x * 100:.1f}%"  # noqa: E731
        print(
            f"world_size={args.world_size}: CV over runs of step time {pc(res['cv_step_time'])}, "
            f"of CPU time per step {pc(res['cv_step_cpu'])} ({res['target_runs']} runs)"
        )
        print("threads (per rank process and thread name; CPU s over the run, cores seen, allowed CPUs):")
        for g in res["threads"]:
            if g["cpu_s"] >= 0.5:
                print(
                    f"  pid {g['pid']} rank {g['rank']} {g['thread']:18s} x{g['threads']:<3d} {g['cpu_s']:7.2f} s  "
                    f"cores {g['cores']} allowed {g['allowed']}"
                )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=list))
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
