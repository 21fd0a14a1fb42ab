"""Benchmark: the advice's predicted gains against the measured gains of their fixes (calibration).

    .venv/bin/python bench/bench_advice_calibration.py [--cases straggler,input_delay,...] [--out DIR]
        [--rounds 2] [--max-sessions 3]

Each case is a small real run (msrun or torchrun, 2 ranks) one knob away from its fix: an injected cause or a
mis-set knob. The bench sweeps it once (profiler on), reads its stored advice (the top root finding, its predicted
gain) and measures the fix:

- a root with a knob (`try`): `perfbench advise RUN --try 1 --repeats R` (R rounds of the original re-run, then the
  fix, interleaved, profiler off), again and again (`--max-sessions`) until the measured gain's 95% interval is
  narrower than half the gain;
- an injected cause (a straggler, a slow input pipeline: no knob of the job, the fix is removing it): one sweep
  whose axis is the injected key (injected value, 0) with `repeats` = R, which interleaves the two the same way;
- a knob given in the case (dotted keys): the original and the knobbed configuration as single-run sweeps,
  alternated R x sessions times, profiler off, and predicted by the expected rule's root (the knob's own gain,
  whichever root is first: fp16 compression, which a loaded machine's straggler can outrank); for a knob the rule
  predicts a loss for and so does not offer (the tensor-parallel case: halving T is predicted slower) the rule's
  unclipped net gain (`tensor_parallel_comm.halving_gain`), the case passing when the top root is not that rule.

The measured gain is mean(original) - mean(fix) per step with its Welch 95% interval, on two bases: wall
(`step_time_s`: median over measured steps of the slowest rank's step time) and CPU (per step the largest rank's
process CPU time, `cpu_s`, median over measured steps). The basis reported is wall when its interval meets the
target, else CPU when its interval does (CPU time does not stretch when other jobs take the cores, but it does not
see idle time either: an idle cause such as a slow input pipeline has only a wall basis), else wall. The 1-minute
load average before and after each case is printed: the machine this runs on is shared.

Output: one JSON line per case in DIR/calibration.jsonl and the Markdown table of docs/advice.md ("Calibration").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from analyzers.analyses import advice

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 5, "warmup_steps": 2},
    "profile": {"enabled": True, "steps": 2},
    "launch": {"timeout_s": 600, "stall_timeout_s": 300},
    "sweep": {"world_size": [2]},
}
#: the MoE cases: TINY's schedule with the MoE workload (its model given per case)
TINY_MOE = {k: v for k, v in TINY.items() if k != "model"} | {"workload": "moe"}
#: the script cases (a user's own job, unfused): TINY's profile, launch and world size, no gradient fusion
SCRIPT_UNFUSED = {"workload": "script", "parallel": {"comm_fusion": 0}} | {
    k: TINY[k] for k in ("profile", "launch", "sweep")
}
PIPE_MODEL = {"image_size": 32, "num_classes": 10, "width": 8, "layers": [3, 4, 6, 3]}


def _with(base: dict, **over) -> dict:
    out = json.loads(json.dumps(base))
    for k, v in over.items():
        out[k] = dict(out.get(k) or {}, **v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: name -> (sweep YAML, the rule the top root must have, how the fix is measured: "advise", the injected key, or the
#: knobs (dotted keys) of a fix the rule predicts a loss for and so does not offer: measured anyway)
CASES: dict[str, tuple[dict, str, str | dict]] = {
    "straggler": (
        _with(TINY, inject={"straggler_rank": 1, "straggler_busy_ms": 150.0}),
        advice.slow_rank.ID,
        "straggler_busy_ms",
    ),
    "input_delay": (_with(TINY, inject={"input_delay_ms": 150.0}), advice.free_time.ID, "input_delay_ms"),
    "unfused": (_with(TINY, parallel={"comm_fusion": 0}), advice.small_packets.ID, "advise"),
    "unbalanced_split": (
        _with(
            TINY,
            model=PIPE_MODEL,
            train={"batch_size": 8, "steps": 6, "warmup_steps": 3},
            parallel={"pipeline_stages": 2, "micro_batches": 4, "pipeline_split": [2, 16]},
        ),
        advice.stage_imbalance.ID,
        "advise",
    ),
    "bubble": (
        _with(
            TINY,
            model=PIPE_MODEL,
            train={"batch_size": 8, "steps": 6, "warmup_steps": 3},
            parallel={"pipeline_stages": 2, "micro_batches": 1, "pipeline_schedule": "gpipe"},
        ),
        advice.pipeline_bubble.ID,
        "advise",
    ),
    "fp16_compression": (
        _with(
            TINY,
            model={"image_size": 8, "num_classes": 10, "width": 32, "layers": [1, 1, 1, 1]},
            train={"batch_size": 1, "steps": 5, "warmup_steps": 2},
            parallel={"comm_fusion": "all"},
        ),
        advice.exposed_communication.ID,
        # measured as the knob itself (alternating sweeps): under load another root (a straggler) may come first
        {"parallel.grad_compression": "fp16"},
    ),
    advice.expert_imbalance.ID: (
        _with(TINY_MOE, model={"num_experts": 4, "top_k": 1, "capacity_factor": 4.0, "aux_loss_coef": 0.0}),
        advice.expert_imbalance.ID,
        "advise",
    ),
    # the rule declines this knob (predicted slower: the doubled replicas' collectives): measured anyway
    "tensor_parallel": (
        _with(TINY_MOE, model={"num_experts": 2, "hidden_size": 64}, parallel={"tensor_parallel": 2}),
        advice.tensor_parallel_comm.ID,
        {"parallel.tensor_parallel": 1, "train.batch_size": 2},
    ),
    "own_job_unfused": (
        _with(
            SCRIPT_UNFUSED,
            script={
                "path": str(ROOT / "examples/own-job/train_mindspore.py"),
                "framework": "mindspore",
                "args": [
                    "--batch-size",
                    "{train.batch_size}",
                    "--steps",
                    "{train.steps}",
                    "--lr",
                    "0.01",
                    "--fusion-mb",
                    "{parallel.comm_fusion}",
                ],
            },
            train={"batch_size": 8, "steps": 6, "warmup_steps": 2},
        ),
        advice.small_packets.ID,
        # measured as the knob itself (alternating sweeps; the script gets "all" as a number of MB): on a step of
        # ~10-25 ms the fusion finding and the generic exposed-communication one are close, either may come first
        {"parallel.comm_fusion": "all"},
    ),
    "pytorch_unfused": (
        _with(
            SCRIPT_UNFUSED,
            script={
                "path": str(ROOT / "workloads/torch_ddp/train.py"),
                "framework": "pytorch",
                "env": {"OMP_NUM_THREADS": "1"},
            },
            knobs={"width": 8, "image_size": 32, "num_classes": 10},
            train={"batch_size": 4, "steps": 6, "warmup_steps": 2},
        ),
        advice.small_packets.ID,
        "advise",
    ),
}
#: not runnable as a timed case on this machine: memory findings buy memory, not time (no gain to calibrate)
NO_GAIN = {
    "recompute_zero": f"{advice.memory_near_capacity.ID} / recompute and ZeRO findings carry no time gain "
    "(they buy memory)"
}


def perfbench(*args, timeout: float = 3000) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfbench", *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _runs(results: Path) -> list[dict]:
    from perfbench.store import Store

    return Store(results).list_runs()


def step_ms(store, rid: str) -> tuple[float | None, float | None]:
    """(wall, cpu) ms per step of one run: the stored step_time_s; per step the largest rank's cpu_s, median over
    measured steps."""
    rec = store.get_run(rid)
    if rec.get("status") != "ok":
        return None, None
    wall = (rec.get("metrics") or {}).get("step_time_s")
    wall = None if wall is None else float(wall) * 1000
    cpu = None
    try:
        ws = store.read_table(rid, "workload_steps")
        warm = int(rec["config"]["train"]["warmup_steps"])
        ws = ws[ws["step"] >= warm]
        if "cpu_s" in ws and ws["cpu_s"].notna().any():
            cpu = float(ws.groupby("step")["cpu_s"].max().median()) * 1000
    except Exception:  # noqa: BLE001 - a run without step records has no CPU basis
        cpu = None
    return wall, cpu


def _pair_steps(store, is_fix) -> tuple[list, list, list, list]:
    """(original wall, original CPU, fix wall, fix CPU) ms per step of a pair sweep's runs, each run on the side
    `is_fix(its config)` says."""
    base_w, base_c, fix_w, fix_c = [], [], [], []
    for x in store.list_runs():
        w, c = step_ms(store, x["run_id"])
        fixed = is_fix(x["config"])
        (fix_w if fixed else base_w).append(w)
        (fix_c if fixed else base_c).append(c)
    return base_w, base_c, fix_w, fix_c


def knob_gain(top, orig: dict) -> float | None:
    """The predicted gain of the top root's fix: step - predicted_step_ms where it has one, else gain_ms (as
    perfbench/run/advise_try.py's trials table)."""

    def num(v):
        return None if v is None or v != v else float(v)

    step, pred = num((orig.get("metrics") or {}).get("step_time_s")), num(top.get("predicted_step_ms"))
    return step * 1000 - pred if step is not None and pred is not None else num(top.get("gain_ms"))


def declined_gain(store, orig: dict) -> float | None:
    """The net gain the tensor-parallel rule predicts for halving T on the stored run `orig` (negative: a loss;
    tensor_parallel_comm.halving_gain over its stored tables and config)."""
    rid = orig["run_id"]
    names = {
        "comm_exposure_classes": "comm_exposure_classes",
        "steps": "profile_steps",
        "ops_for_checks": "profile_ops",
    }
    tables: dict = {k: store.read_table(rid, v) for k, v in names.items()}
    tables[advice.CONFIG_KEY] = orig["config"]
    return advice.tensor_parallel_comm.halving_gain(tables, orig.get("metrics") or {})


def gain(base: list[float], fix: list[float]) -> dict:
    from analyzers.stats import welch_ci

    base = [v for v in base if v is not None]
    fix = [v for v in fix if v is not None]
    if not base or not fix:
        return {"gain_ms": None, "low_ms": None, "high_ms": None, "n": (len(base), len(fix))}
    g = statistics.fmean(base) - statistics.fmean(fix)
    ci = welch_ci(fix, base)
    return {"gain_ms": g, "low_ms": ci[0] if ci else None, "high_ms": ci[1] if ci else None, "n": (len(base), len(fix))}


def narrow(m: dict) -> bool:
    return (
        m["gain_ms"] is not None and m["low_ms"] is not None and (m["high_ms"] - m["low_ms"]) < 0.5 * abs(m["gain_ms"])
    )


def pick(wall: dict, cpu: dict) -> tuple[str, dict]:
    if narrow(wall):
        return "wall", wall
    if narrow(cpu):
        return "cpu", cpu
    return "wall", wall


def run_case(name: str, out: Path, rounds: int, max_sessions: int) -> dict:
    from perfbench.store import Store

    spec, expect, fix = CASES[name]
    load0 = os.getloadavg()[0]
    t0 = time.time()
    results = out / name
    cfgp = out / f"{name}.yaml"
    cfgp.write_text(yaml.safe_dump(dict(spec, name=name), sort_keys=False))
    row: dict = {"case": name, "expect": expect}
    if not _runs(results):
        r = perfbench("sweep", cfgp, "--results", results)
        if r.returncode:
            row["error"] = f"sweep failed: {r.stderr.strip().splitlines()[-1:]}"
            return row
    store = Store(results)
    orig = sorted((x for x in store.list_runs() if x.get("source") == "sweep"), key=lambda x: x["timings"]["started"])[
        0
    ]
    rid = orig["run_id"]
    adv = store.read_table(rid, "advice")
    roots = adv[adv["symptom_of"].isna()] if adv is not None and len(adv) else None
    if roots is None or not len(roots):
        row["error"] = "no advice"
        return row
    top = roots.iloc[0]
    declines = expect == advice.tensor_parallel_comm.ID and isinstance(fix, dict)
    # the knob measured by alternating sweeps is the expected rule's root's (its predicted gain), else the top's
    own = roots[roots["rule"] == expect]
    mine = own.iloc[0] if isinstance(fix, dict) and len(own) else top
    row.update(
        predicted_of=mine["id"],
        top=top["id"],
        top_rule=top["rule"],
        top_ok=top["rule"] != expect if declines else top["rule"] == expect,
        predicted_ms=declined_gain(store, orig) if declines else knob_gain(mine, orig),
        step_ms=float(orig["metrics"]["step_time_s"]) * 1000,
        roots=[
            (r["id"], None if r["gain_ms"] != r["gain_ms"] else round(float(r["gain_ms"]), 1))
            for _, r in roots.iterrows()
        ],
    )
    base_w, base_c, fix_w, fix_c = [], [], [], []
    if isinstance(fix, dict):  # a knob the rule declines: original and fix as single runs, interleaved, profiler off
        pres = out / f"{name}-pair"
        for i in range(rounds * max_sessions):
            for tag, over in (("orig", {}), ("fix", fix)):
                cfg = _with(spec, profile={"enabled": False})
                for key, v in over.items():
                    sec, k = key.split(".")
                    cfg[sec] = dict(cfg.get(sec) or {}, **{k: v})
                pp = out / f"{name}-{tag}.yaml"
                pp.write_text(yaml.safe_dump(dict(cfg, name=f"{name}-{tag}{i}"), sort_keys=False))
                r = perfbench("sweep", pp, "--results", pres)
                if r.returncode:
                    row["error"] = f"{tag} sweep failed: {r.stderr.strip().splitlines()[-1:]}"
        base_w, base_c, fix_w, fix_c = _pair_steps(
            Store(pres),
            lambda c: all(c[key.split(".")[0]][key.split(".")[1]] == v for key, v in fix.items()),
        )
        row["fix"] = json.dumps(fix)
    elif fix == "advise":
        if not isinstance(top["try"], str) or not top["try"]:
            row["error"] = f"top root {top['id']} has no knob to try"
            return row
        for _ in range(max_sessions):
            r = perfbench("advise", rid, "--try", 1, "--repeats", rounds, "--json", "--results", results)
            if r.returncode:
                row["error"] = f"advise --try failed: {r.stderr.strip().splitlines()[-1:]}"
                break
            trials = store.read_advice_trials()
            trials = trials[(trials["of"] == rid) & (trials["finding"] == top["id"])]
            base_w, base_c, fix_w, fix_c = [], [], [], []
            for _, t in trials.iterrows():
                for run_id in t["base_runs"]:
                    w, c = step_ms(store, run_id)
                    base_w.append(w)
                    base_c.append(c)
                for run_id in t["runs"]:
                    w, c = step_ms(store, run_id)
                    fix_w.append(w)
                    fix_c.append(c)
            if narrow(gain(base_w, fix_w)) or narrow(gain(base_c, fix_c)):
                break
        row["fix"] = top["try"]
    else:  # an injected cause: interleaved sweep of (injected, 0), profiler off
        injected = spec["inject"][fix]
        pair = _with(spec, profile={"enabled": False}, sweep={"world_size": [2], fix: [injected, 0.0]})
        pair["repeats"] = rounds * max_sessions
        pp = out / f"{name}-pair.yaml"
        pp.write_text(yaml.safe_dump(dict(pair, name=f"{name}-pair"), sort_keys=False))
        pres = out / f"{name}-pair"
        r = perfbench("sweep", pp, "--results", pres)
        if r.returncode:
            row["error"] = f"pair sweep failed: {r.stderr.strip().splitlines()[-1:]}"
        base_w, base_c, fix_w, fix_c = _pair_steps(Store(pres), lambda c: float(c["inject"][fix]) == 0)
        row["fix"] = json.dumps({f"inject.{fix}": 0})
    wall, cpu = gain(base_w, fix_w), gain(base_c, fix_c)
    basis, m = pick(wall, cpu)
    row.update(
        wall=wall,
        cpu=cpu,
        basis=basis,
        measured_ms=m["gain_ms"],
        low_ms=m["low_ms"],
        high_ms=m["high_ms"],
        ratio=None if not row["predicted_ms"] or m["gain_ms"] is None else m["gain_ms"] / row["predicted_ms"],
        narrow=narrow(m),
        load=(round(load0, 1), round(os.getloadavg()[0], 1)),
        minutes=round((time.time() - t0) / 60, 1),
    )
    return row


def markdown(rows: list[dict]) -> str:
    def f(v, d=1):
        return "–" if v is None else f"{v:.{d}f}"

    def m(x):
        if not x or x["gain_ms"] is None:
            return "–"
        iv = "" if x["low_ms"] is None else f" ({f(x['low_ms'])} … {f(x['high_ms'])})"
        return f"{f(x['gain_ms'])}{iv}"

    head = (
        "| case | top root | predicted gain ms | measured wall ms (95%) | measured CPU ms (95%) | ratio | basis "
        "| load |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "measured_ms" not in r:
            lines.append(
                f"| {r['case']} | {r.get('top', '–')} | {f(r.get('predicted_ms'))} | not measured: "
                f"{r.get('error', '')} | – | – | – | – |"
            )
            continue
        n = r["wall"]["n"]
        lines.append(
            f"| {r['case']} | `{r['top']}` | {f(r.get('predicted_ms'))} | {m(r['wall'])} | {m(r['cpu'])} "
            f"| {f(r['ratio'], 2)} | {r['basis']}{'' if r['narrow'] else ', wide'}, {n[0]}/{n[1]} runs "
            f"| {r['load'][0]}-{r['load'][1]} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--out", default="/tmp/advice-calibration", help="results folder (one store per case)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per advise --try session (--repeats)")
    ap.add_argument("--max-sessions", type=int, default=3, help="sessions at most per case (the repeat cap)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.cases.split(","):
        if name in NO_GAIN:
            rows.append({"case": name, "error": NO_GAIN[name]})
            continue
        row = run_case(name, out, a.rounds, a.max_sessions)
        rows.append(row)
        with open(out / "calibration.jsonl", "a") as fh:
            fh.write(json.dumps(row, default=str) + "\n")
        print(json.dumps(row, default=str), flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
