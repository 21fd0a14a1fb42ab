"""`perfbench predict`: step time, throughput, breakdown and scaling for settings that were never run."""

from __future__ import annotations

import argparse
import copy
import itertools
import json
from typing import Any

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError

DESCRIPTION = """\
Predict what a training job will do with settings or cluster sizes that were never run, from a model
calibrated on stored runs (--from). The model (docs/predict.md): per-rank time outside collectives from
the runs' step times and profiled breakdown, scaled by samples per replica, plus a fixed cost per extra
micro-batch; one cost per collective, latency x ring hops + algorithm factor (all-reduce 2(n-1)/n,
all-gather (n-1)/n, broadcast 1) x bytes / bandwidth, with the buckets comm_fusion makes and the bytes
compression sends (fp16: half; powersgd/topk: compression_ratio); the overlap of buckets with backward
(overlap_grad_comm); compute per precision (precision: fp32/fp16/bf16, gradients stay fp32);
pipelines through the GPipe/1F1B schedule simulator. Latency and bandwidth are fitted from the runs'
own collectives, or taken from a hardware profile (--hardware ascend910: published Ascend 910 HCCS/RoCE
figures, cited in the file), so a CPU-measured job can be projected onto another machine; every
prediction lists the assumptions it made and an uncertainty interval.

examples:
  perfbench predict --from quickstart-20261123-101500 --set world_size=8
  perfbench predict --from SWEEP --set comm_fusion=all --set grad_compression=fp16 --json
  perfbench predict --from SWEEP --set world_size=1,2,4,8,16 --hardware ascend910
  perfbench predict --from SWEEP --set overlap_grad_comm=false,true --set precision=fp16
  perfbench predict --from SWEEP --save-hardware my-machine.yaml      # write the fitted machine profile
  perfbench predict --replay ../shared/fixtures/ascend/.../level1      # replay check on an Ascend profile
"""

#: --set keys the model understands, with their types
SETTABLE: dict[str, Any] = {
    "world_size": int,
    "batch_size": int,
    "micro_batches": int,
    "pipeline_stages": int,
    "tensor_parallel": int,
    "pipeline_schedule": str,
    "comm_fusion": str,
    "grad_compression": str,
    "compression_ratio": float,
    "compute_scale": float,
    "zero_stage": int,
    "recompute": str,
    "optimizer": str,
    "precision": str,
    "overlap_grad_comm": "bool",
}
#: --set keys with a smallest possible value: (minimum, what the error says)
AT_LEAST: dict[str, tuple[float, str]] = {
    "world_size": (1, "expected a number of ranks >= 1"),
    "batch_size": (1, "expected a batch size >= 1"),
    "micro_batches": (1, "expected a number of micro-batches >= 1"),
    "pipeline_stages": (1, "expected a number of pipeline stages >= 1"),
    "tensor_parallel": (1, "expected a tensor-parallel size >= 1"),
    "compression_ratio": (0.0, "expected a ratio >= 0"),
    "compute_scale": (0.0, "expected a scale > 0"),
    "zero_stage": (0, "expected a ZeRO stage 0-3"),
}
#: AT_LEAST keys whose minimum itself is impossible
ABOVE = ("compute_scale",)
#: keys only the memory model (--memory) knows
MEMORY_ONLY = ("zero_stage", "recompute", "optimizer")


def register(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict step time, throughput and scaling for settings never run",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_results_arg(p)
    add_json_arg(p)
    p.add_argument(
        "--from",
        dest="sources",
        action="append",
        metavar="SWEEP_OR_RUN",
        help="calibrate on this sweep (its ok runs) or run (id, short id or prefix); repeat or comma-separate "
        "for several. --set starts from the settings of the run on the most ranks (uncompressed, "
        "without micro-batches where there is one)",
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a setting to predict for: {', '.join(SETTABLE)} (compute_scale: per-rank compute time factor on "
        "the target hardware). VALUE may be a comma-separated list: one prediction per value "
        "(the cartesian product over several keys)",
    )
    p.add_argument("--wide", action="store_true", help="every table column, even beyond the terminal's width")
    p.add_argument(
        "--hardware",
        metavar="FILE",
        help="hardware profile YAML, or a built-in name (ascend910, cpu-2core); default: the machine the runs "
        "measured, fitted from them",
    )
    p.add_argument(
        "--measure",
        choices=("wall", "cpu"),
        default="wall",
        help="what to model: wall-clock step time (step_time_s, default) or the rank's CPU time per step "
        "(step_cpu_s: on a machine shared with other jobs, what their load stretches far less); "
        "with cpu, step_time_s and throughput in the output are per CPU second",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="predict each rank's peak memory instead of step time (model states per ZeRO stage from the "
        "parameter count, activations per sample fitted from the runs, buffers, baseline; with "
        "--hardware ascend910 against its device capacity). --set also takes zero_stage, recompute, "
        "optimizer",
    )
    p.add_argument("--save-hardware", metavar="FILE", help="write the measured machine's fitted profile to FILE")
    p.add_argument(
        "--replay",
        metavar="PATH",
        help="instead of predicting: rebuild each profiled rank's step of an Ascend profiler output from its own "
        "kernels and collectives and compare with the profiler's step_trace_time",
    )
    p.set_defaults(func=run)


def parse_sets(sets: list[str]) -> list[dict]:
    """`--set` values -> the list of targets (cartesian product of comma-separated values)."""
    axes: dict[str, list] = {}
    for item in sets:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected KEY=VALUE")
        key, value = (x.strip() for x in item.split("=", 1))
        if key not in SETTABLE:
            raise UserError(f"--set {key}: unknown setting (known: {', '.join(SETTABLE)})")
        vals = []
        for v in value.split(","):
            if SETTABLE[key] == "bool":
                if v.strip().lower() not in ("true", "false"):
                    raise UserError(f"--set {key}={v!r}: expected true or false")
                vals.append(v.strip().lower() == "true")
                continue
            if key == "precision" and v.strip() not in ("fp32", "fp16", "bf16"):
                raise UserError(f"--set precision={v!r}: expected fp32, fp16 or bf16")
            try:
                vals.append(SETTABLE[key](v.strip()))
            except ValueError:
                raise UserError(f"--set {key}={v!r}: expected {SETTABLE[key].__name__}") from None
            low = AT_LEAST.get(key)
            if low is not None and not (vals[-1] > low[0] if key in ABOVE else vals[-1] >= low[0]):
                raise UserError(f"--set {key}={v.strip()}: {low[1]}")
        axes[key] = vals
    if not axes:
        return [{}]
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def run(args) -> int:
    if args.replay:
        return _replay(args)
    if not args.sources:
        raise UserError("--from SWEEP_OR_RUN is required (the stored runs to calibrate on; see `perfbench ls`)")
    from perfbench.predict import hardware as hwmod
    from perfbench.predict.fit import calibrate
    from perfbench.predict.model import predict
    from perfbench.store import Store

    store = Store(args.results, create=False)
    targets = parse_sets(args.sets)
    if args.memory:
        return _memory(args, store, targets)
    for key in MEMORY_ONLY:
        if any(key in t for t in targets):
            raise UserError(f"--set {key}: only the memory model knows it (add --memory)")
    cal = calibrate(store, args.sources, args.measure)
    if args.save_hardware:
        hwmod.save(cal.machine, args.save_hardware)
    hw = hwmod.load(args.hardware) if args.hardware else None
    out = []
    for t in targets:
        t = dict(t)
        scale = t.pop("compute_scale", None)
        h = hw
        if scale is not None:
            h = copy.copy(hw or cal.machine)
            h.compute_scale = scale
        out.append(dict(predict(cal, t, h), measure=args.measure))
    if args.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return 0
    _render(out, cal, getattr(args, "wide", False))
    return 0


def _render(preds: list[dict], cal, wide: bool = False) -> None:
    from perfbench.views.results import console, grid

    c = console(wide=wide)
    keys = [k for k in preds[0]["settings"] if len({repr(p["settings"][k]) for p in preds}) > 1] or ["world_size"]
    heads = [k.replace("_", " ") for k in keys] + [
        "step ms",
        "interval ms",
        "samples/s",
        "scaling",
        "comm share",
        "compute ms",
        "exposed comm ms",
        "free ms",
        "overlap ms",
        "bubble ms",
        "collectives",
    ]
    rows = []
    for p in preds:
        b = p["breakdown"]
        eff = p["scaling_efficiency"]
        rows.append(
            [
                *[str(p["settings"][k]) for k in keys],
                f"{p['step_time_s'] * 1e3:.1f}",
                f"{p['interval']['low'] * 1e3:.0f}-{p['interval']['high'] * 1e3:.0f}",
                f"{p['throughput']:.1f}",
                "-" if eff is None else f"{eff:.1%}",
                f"{p['comm_share']:.1%}",
                f"{b['computing_s'] * 1e3:.1f}",
                f"{b['communication_not_overlapped_s'] * 1e3:.1f}",
                f"{b['free_s'] * 1e3:.1f}",
                f"{b['overlapped_s'] * 1e3:.1f}",
                f"{b['bubble_s'] * 1e3:.1f}",
                str(p["collectives"]["count"]),
            ]
        )
    title = f"predicted on {preds[0]['hardware']} from {len(cal.inputs)} runs" + (
        " (CPU time per step)" if preds[0].get("measure") == "cpu" else ""
    )
    c.print(grid(title, heads, rows, None if wide else c.width, left=len(keys), keep=len(keys) + 1))
    _trailer(c, preds, keys, cal.inputs)


def _trailer(c, preds: list[dict], keys: list[str], inputs: list[str]) -> None:
    """Below a predictions table: the settings every row shares, the runs calibrated on, the assumptions."""
    c.print("[b]settings[/b] " + ", ".join(f"{k}={v}" for k, v in preds[0]["settings"].items() if k not in keys))
    c.print("[b]calibrated on[/b] " + ", ".join(inputs))
    c.print("[b]assumptions[/b]")
    for a in dict.fromkeys(a for p in preds for a in p["assumptions"]):
        c.print(f"  - {a}")


def _memory(args, store, targets: list[dict]) -> int:
    from perfbench.predict import hardware as hwmod
    from perfbench.predict.memory import MEMORY_KEYS, calibrate_memory, memory_target, predict_memory

    cal, ref = calibrate_memory(store, args.sources)
    hw = hwmod.load(args.hardware) if args.hardware else None
    out = []
    for t in targets:
        s = memory_target(ref, t)
        p = predict_memory(cal, s, hw)
        p.update(
            settings={k: s[k] for k in MEMORY_KEYS if k != "pipeline_stages"},
            hardware=hw.name if hw else "measured machine",
            inputs=list(cal.inputs),
        )
        out.append(p)
    if args.json:
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return 0
    from perfbench.views.results import console, grid

    wide = getattr(args, "wide", False)
    c = console(wide=wide)
    keys = [k for k in out[0]["settings"] if len({repr(p["settings"][k]) for p in out}) > 1] or ["zero_stage"]
    heads = [k.replace("_", " ") for k in keys] + [
        "peak MiB",
        "fits",
        "interval MiB",
        "capacity MiB",
        "params MiB",
        "grads MiB",
        "optimizer MiB",
        "activations MiB",
        "buffers MiB",
        "baseline MiB",
    ]
    mb = 2**20
    rows = []
    for p in out:
        q = p["parts"]
        rows.append(
            [
                *[str(p["settings"][k]) for k in keys],
                f"{p['peak_bytes'] / mb:.0f}",
                "-" if p["fits"] is None else ("yes" if p["fits"] else "NO"),
                f"{p['interval']['low'] / mb:.0f}-{p['interval']['high'] / mb:.0f}",
                "-" if p["capacity_bytes"] is None else f"{p['capacity_bytes'] / mb:.0f}",
                *[
                    f"{q[k] / mb:.0f}"
                    for k in (
                        "params_bytes",
                        "grads_bytes",
                        "optimizer_bytes",
                        "activations_bytes",
                        "buffers_bytes",
                        "baseline_bytes",
                    )
                ],
            ]
        )
    title = f"predicted peak memory per rank on {out[0]['hardware']} from {len(cal.inputs)} runs"
    t = grid(title, heads, rows, None if wide else c.width, left=len(keys), keep=len(keys) + 1)
    c.print(t)
    _trailer(c, out, keys, cal.inputs)
    return 0


def _replay(args) -> int:
    from perfbench.predict.replay import replay_path

    rows = replay_path(args.replay, args.hardware)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table

    from perfbench.views.results import console

    t = Table(title=f"replay of {args.replay}")
    for col in (
        "rank",
        "step",
        "measured ms",
        "replay ms",
        "error",
        "kernels+comm only ms",
        "error",
        "modelled comm ms",
        "error",
    ):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            str(r["rank"]),
            str(r["step"]),
            f"{r['measured_s'] * 1e3:.2f}",
            f"{r['replay_s'] * 1e3:.2f}",
            f"{r['replay_error']:+.1%}",
            f"{r['critical_path_s'] * 1e3:.2f}",
            f"{r['critical_path_error']:+.1%}",
            "-" if r.get("modelled_comm_s") is None else f"{r['modelled_comm_s'] * 1e3:.2f}",
            "-" if r.get("modelled_comm_error") is None else f"{r['modelled_comm_error']:+.1%}",
        )
    console().print(t)
    return 0
