"""Exhaustive `perfbench sweep` against `perfbench tune` (several seeds) on the same space, side by side in
one run: how close tune's best gets to the sweep's winner, and at what share of the sweep's wall time.

    .venv/bin/python bench/bench_tune_vs_sweep.py [--seeds 3] [--verify 3] [--sweep-top 2] [--keep DIR] [--json]

The space (24 points): data-parallel narrow ResNet-50 (width 16, 32x32) on 2 ranks, comm_fusion {0, 1, 8,
all} x grad_compression {none, fp16} x batch_size {8, 16, 32}; tune runs with its defaults (no `search:`
section except the seed: it confirms its best 2 trials by 2 interleaved re-measurements each). Each command
runs in its own results folder (no compile cache shared).

How close, judged fairly: on a shared, loaded machine one run's throughput can be off by 2x, so the sweep's
single-run winner is as noisy as anything tune measured. After the sweep and the searches, a verification
phase re-measures the sweep's best `--sweep-top` points (by its single runs) and every seed's pick side by
side, interleaved (A B C ... A B C ...), `--verify` times each (profiler off, same steps); the exhaustive
winner is the sweep candidate with the best verified median, and "within" = the median throughput of tune's
pick / the winner's, both from that same phase. The single-run numbers (the sweep's own measurement of tune's
pick, tune's own value) are reported next to it. `--reuse DIR` keeps the phases whose output is already in
DIR (a bench that was interrupted continues).
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

import yaml

ROOT = Path(__file__).resolve().parents[1]

SPACE = {
    "name": "bench-tune",
    "workload": "resnet50",
    "model": {"image_size": 32, "width": 16, "layers": [3, 4, 6, 3]},
    "train": {"steps": 12, "warmup_steps": 3},
    "profile": {"steps": 3},
    "sweep": {
        "world_size": [2],
        "comm_fusion": [0, 1, 8, "all"],
        "grad_compression": ["none", "fp16"],
        "batch_size": [8, 16, 32],
    },
}
AXES = ("comm_fusion", "grad_compression", "batch_size")


def _key(settings: dict) -> tuple:
    return tuple(str(settings.get(k)) for k in AXES)


def _run(cmd: list[str], log: Path) -> float:
    t0 = time.time()
    with open(log, "w") as fh, open(log.with_suffix(".out"), "w") as out:
        r = subprocess.run(cmd, stdout=out, stderr=fh, cwd=ROOT)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}); see {log}")
    return time.time() - t0


def _phase(marker: Path, work) -> float:
    """Run a phase once: its wall time is kept in `marker`, so a reused folder skips it."""
    if marker.exists():
        return float(marker.read_text())
    wall = work()
    marker.write_text(str(wall))
    return wall


def verify(py: str, tmp: Path, settings: list[dict], repeats: int) -> dict[tuple, dict]:
    """Re-measure each distinct settings `repeats` times, interleaved (repeat-major), profiler off."""
    from perfbench.store import Store

    distinct = list({_key(s): s for s in settings}.values())
    out_dir = tmp / "verify"
    for r in range(repeats):
        for i, st in enumerate(distinct):
            cfg = dict(
                SPACE,
                name=f"verify-{i}-r{r}",
                profile={"enabled": False},
                sweep={"world_size": [2], **{k: [st[k]] for k in AXES}},
            )
            p = tmp / f"verify-{i}-r{r}.yaml"
            p.write_text(yaml.safe_dump(cfg, sort_keys=False))
            _phase(
                tmp / f"verify-{i}-r{r}.wall",
                lambda: _run(
                    [py, "-m", "perfbench", "sweep", str(p), "--results", str(out_dir)], tmp / f"verify-{i}-r{r}.log"
                ),
            )
    tps: dict[tuple, list[float]] = {}
    for rec in Store(out_dir).list_runs():
        tp = (rec.get("metrics") or {}).get("throughput")
        if rec["status"] == "ok" and tp:
            tps.setdefault(_key(rec["settings"]), []).append(round(tp, 1))
    return {k: {"runs": v, "median": statistics.median(v)} for k, v in tps.items()}


def training_share(store, run_ids: list[str], wall_s: float) -> float:
    from perfbench.tune.report import wall_split

    return wall_split(store, run_ids, wall_s)["training_share"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--keep",
        "--reuse",
        dest="keep",
        help="keep the results folders here and reuse phases already done there (default: a temporary folder)",
    )
    ap.add_argument("--verify", type=int, default=3, help="interleaved re-measurements of each finalist (default 3)")
    ap.add_argument(
        "--sweep-top",
        type=int,
        default=2,
        help="the sweep's best points (by its single runs) re-measured as candidates for its winner (default 2)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from perfbench.store import Store

    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pb-tune-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    cfg_path = tmp / "space.yaml"
    cfg_path.write_text(yaml.safe_dump(SPACE, sort_keys=False))

    load = [os.getloadavg()[0]]
    sweep_dir = tmp / "sweep"
    sweep_wall = _phase(
        tmp / "sweep.wall",
        lambda: _run([py, "-m", "perfbench", "sweep", str(cfg_path), "--results", str(sweep_dir)], tmp / "sweep.log"),
    )
    load.append(os.getloadavg()[0])
    st = Store(sweep_dir)
    runs = [r for r in st.list_runs() if r["status"] == "ok"]
    by_key = {_key(r["settings"]): r["metrics"]["throughput"] for r in runs}
    winner = max(runs, key=lambda r: r["metrics"]["throughput"])
    win_tp = winner["metrics"]["throughput"]
    sweep_share = training_share(st, [r["run_id"] for r in st.list_runs()], sweep_wall)

    seeds = []
    for seed in range(args.seeds):
        cfg = dict(SPACE, search={"seed": seed})
        p = tmp / f"tune-seed{seed}.yaml"
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        out = tmp / f"tune-seed{seed}"
        wall = _phase(
            tmp / f"tune-seed{seed}.wall",
            lambda: _run(
                [py, "-m", "perfbench", "tune", str(p), "--results", str(out), "--json"], tmp / f"tune-seed{seed}.log"
            ),
        )
        load.append(os.getloadavg()[0])
        ans = json.loads((tmp / f"tune-seed{seed}.out").read_text())
        best = ans["best"]
        in_sweep = by_key.get(_key(best["settings"]))
        seeds.append(
            {
                "seed": seed,
                "wall_s": round(wall, 1),
                "wall_ratio": round(wall / sweep_wall, 3),
                "trials": len(ans["trials"]),
                "pruned": sum(t["status"] == "pruned" for t in ans["trials"]),
                "failed": sum(t["status"] == "failed" for t in ans["trials"]),
                "best_settings": {k: best["settings"].get(k) for k in AXES},
                "best_tp_tune": round(best["value"], 2),
                "best_tp_in_sweep": round(in_sweep, 2) if in_sweep else None,
                "within": round(in_sweep / win_tp, 4) if in_sweep else None,
                "training_share": ans["wall_split"]["training_share"],
                "confirm_runs": sum(len(c["runs"]) for c in (ans.get("confirmation") or {}).get("candidates", [])),
                "confirmation": [
                    {
                        "settings": {k: c["settings"].get(k) for k in AXES},
                        "trial": c["trial_value"],
                        "values": c["values"],
                        "median": c["median"],
                    }
                    for c in (ans.get("confirmation") or {}).get("candidates", [])
                ],
            }
        )
    top = sorted(runs, key=lambda r: -r["metrics"]["throughput"])[: max(1, args.sweep_top)]
    verified = verify(py, tmp, [r["settings"] for r in top] + [s["best_settings"] for s in seeds], args.verify)
    load.append(os.getloadavg()[0])
    # the exhaustive answer, confirmed like tune's: the best verified median among the sweep's top points
    win_key = max((_key(r["settings"]) for r in top), key=lambda k: verified.get(k, {"median": 0})["median"])
    win_v = verified[win_key]
    for s in seeds:
        mine = verified[_key(s["best_settings"])]
        s["verified_tp"] = round(mine["median"], 2)
        s["verified_within"] = round(mine["median"] / win_v["median"], 4)
    med = lambda k: statistics.median(s[k] for s in seeds if s[k] is not None)  # noqa: E731
    out = {
        "space_size": len(by_key),
        "sweep_wall_s": round(sweep_wall, 1),
        "sweep_training_share": sweep_share,
        "winner": {"settings": {k: winner["settings"].get(k) for k in AXES}, "throughput": round(win_tp, 2)},
        "sweep_top": [
            {"settings": {k: r["settings"].get(k) for k in AXES}, "throughput": round(r["metrics"]["throughput"], 2)}
            for r in top
        ],
        "verified_winner": dict(zip(AXES, win_key), median=win_v["median"]),
        "seeds": seeds,
        "verified": {" / ".join(k): v for k, v in verified.items()},
        "median": {
            "wall_ratio": med("wall_ratio"),
            "verified_within": med("verified_within"),
            "within_single_run": med("within"),
            "training_share": med("training_share"),
        },
        "load_avg_1min": [round(x, 1) for x in load],
        "results": str(tmp) if args.keep else None,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"space {out['space_size']} points; sweep {sweep_wall:.0f} s wall, training steps "
            f"{sweep_share * 100:.1f}% of it; winner {out['winner']['settings']} {win_tp:.1f} samples/s"
        )
        print(
            f"{'seed':>4}{'wall s':>8}{'of sweep':>10}{'trials':>8}{'pruned':>8}  best settings"
            f"{'':<30}{'tune tp':>9}{'sweep tp':>10}{'of winner':>11}{'train%':>8}"
        )
        for s in seeds:
            print(
                f"{s['seed']:>4}{s['wall_s']:>8.0f}{s['wall_ratio'] * 100:>9.1f}%{s['trials']:>8}{s['pruned']:>8}  "
                f"{json.dumps(s['best_settings']):<43}{s['best_tp_tune']:>9.1f}{(s['best_tp_in_sweep'] or 0):>10.1f}"
                f"{(s['within'] or 0) * 100:>10.1f}%{s['training_share'] * 100:>7.1f}%"
                f"   verified {s['verified_tp']:.1f} = {s['verified_within'] * 100:.1f}% of the winner's"
            )
        for k, v in out["verified"].items():
            print(f"verified {k}: {v['runs']} samples/s, median {v['median']:.1f}")
        print(f"exhaustive winner after verification: {out['verified_winner']}")
        m = out["median"]
        print(
            f"median: {m['wall_ratio'] * 100:.1f}% of the sweep's wall time; tune's best at "
            f"{m['verified_within'] * 100:.1f}% of the winner's throughput re-measured side by side "
            f"({m['within_single_run'] * 100:.1f}% by the sweep's single runs); load average {out['load_avg_1min']}"
        )
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
