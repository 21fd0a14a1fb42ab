"""Where ZeRO's memory saving goes on MindSpore's CPU backend (results in docs/benchmarks.md, "Memory knobs").

Two measurements, each in fresh processes so that one does not inherit the other's memory pool:

1. one process, no msrun: the resident set after `--steps` training steps of full-width ResNet-50 (width
   `--width`, `--image` px, batch 8) with AdamW over every parameter ("full") and over the half of them that
   ZeRO-1 gives rank 0 of 2 (`workloads.parallel.zero.shard_owners`; gradients still for every parameter),
   in graph mode and in PyNative mode (`--modes`). The difference is what sharding the optimizer state frees
   when no broadcast of the parameters follows.
2. `--sweep`: the 2-rank sweep `perfbench sweep` runs for parallel.zero_stage 0 / 1 / 2 (the same model, AdamW,
   3 steps, no profiler), peak resident MB per rank from each run's `memory` table: how much of that saving the
   2-rank step keeps after the owners' broadcast of the updated parameters (compiled Broadcast graphs took all
   of it back; the in-place broadcast of workloads/parallel/zero.py keeps it).

    .venv/bin/python bench/bench_zero_memory.py [--width 64] [--image 32] [--modes graph,pynative] [--sweep] [--json F]

Memory does not depend on the machine's load; the step times printed do.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import os, sys, time
sys.path.insert(0, {root!r})
import numpy as np
import mindspore as ms
from mindspore import nn, ops, ParameterTuple
kind, mode, width, img, steps = {kind!r}, {mode!r}, {width}, {img}, {steps}
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE, device_target="CPU")
from workloads.resnet50.model import ResNet
from workloads.parallel.zero import shard_owners
net = ResNet((3, 4, 6, 3), width=width, num_classes=10)
params = net.trainable_params()
own = shard_owners([int(p.size) for p in params], 2)
mine = [i for i, o in enumerate(own) if o == 0] if kind == "half" else list(range(len(params)))
opt = nn.AdamWeightDecay([params[i] for i in mine], learning_rate=1e-3)
nl = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
class Step(nn.Cell):
    def __init__(self):
        super().__init__(auto_prefix=False)
        self.nl, self.w, self.opt = nl, ParameterTuple(params), opt
        self.g = ops.GradOperation(get_by_list=True)
    def construct(self, x, y):
        loss = self.nl(x, y)
        gs = self.g(self.nl, self.w)(x, y)
        sel = ()
        for i in MINE:
            sel = sel + (gs[i],)
        return ops.depend(loss, self.opt(sel))
MINE = tuple(mine)
step = Step()
x = ms.Tensor(np.random.rand(8, 3, img, img).astype(np.float32)); y = ms.Tensor(np.zeros(8, np.int32))
times = []
for i in range(steps):
    t = time.perf_counter(); step(x, y).asnumpy(); times.append(time.perf_counter() - t)
rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import resource
print("RESULT", rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, times[-1])
"""

SWEEP = """name: zeromem
workload: resnet50
model: {{image_size: {img}, num_classes: 10, width: {width}, layers: [3, 4, 6, 3]}}
train: {{batch_size: 8, steps: 3, warmup_steps: 1, optimizer: adamw, lr: 0.001, weight_decay: 0.01}}
profile: {{enabled: false}}
parallel: {{comm_fusion: 32}}
launch: {{timeout_s: 1200}}
sweep: {{world_size: [2], zero_stage: [0, 1, 2]}}
"""


def probe(kind: str, mode: str, width: int, img: int, steps: int) -> dict:
    code = PROBE.format(root=str(ROOT), kind=kind, mode=mode, width=width, img=img, steps=steps)
    with tempfile.TemporaryDirectory() as tmp:  # graph mode compiles from source files, not from `python -c`
        script = Path(tmp) / "probe.py"
        script.write_text(code)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1800, cwd=tmp)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        return {"kind": kind, "mode": mode, "error": (out.stderr or out.stdout)[-400:]}
    _, rss, hwm, last = line.split()
    return {"kind": kind, "mode": mode, "rss_mb": int(rss) / 2**20, "hwm_mb": int(hwm) / 2**20, "step_s": float(last)}


def sweep(width: int, img: int) -> list[dict]:
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "zeromem.yaml"
        cfg.write_text(SWEEP.format(width=width, img=img))
        res = Path(tmp) / "res"
        subprocess.run(
            [sys.executable, "-m", "perfbench", "sweep", str(cfg), "--results", str(res)], cwd=ROOT, check=False
        )
        rows = []
        for d in sorted((res / "runs").glob("*")):
            run = json.loads((d / "run.json").read_text())
            row = {"zero_stage": run["settings"].get("zero_stage"), "status": run["status"]}
            mem = d / "tables" / "memory.parquet"
            if mem.exists():
                m = pd.read_parquet(mem).sort_values("rank")
                row["peak_mb"] = [round(float(v) / 2**20) for v in m["peak_rss_bytes"]]
            rows.append(row)
        return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--image", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--modes", default="graph,pynative")
    ap.add_argument("--sweep", action="store_true", help="also the 2-rank zero_stage 0/1/2 sweep")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out: dict = {"probes": [], "sweep": None}
    print("one process, AdamW over every parameter (full) or over ZeRO-1's half for rank 0 of 2 (half)")
    for mode in args.modes.split(","):
        for kind in ("full", "half"):
            r = probe(kind, mode, args.width, args.image, args.steps)
            out["probes"].append(r)
            if "error" in r:
                print(f"  {mode:8s} {kind:4s} failed: {r['error']}")
            else:
                print(
                    f"  {mode:8s} {kind:4s} resident {r['rss_mb']:7.0f} MB  high-water {r['hwm_mb']:7.0f} MB  "
                    f"step {r['step_s']:.2f} s"
                )
    if args.sweep:
        out["sweep"] = sweep(args.width, args.image)
        print("2 ranks, perfbench sweep, peak resident MB per rank")
        for r in out["sweep"]:
            print(f"  zero_stage {r['zero_stage']}: {r['status']} {r.get('peak_mb')}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
