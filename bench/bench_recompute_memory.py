"""What `train.recompute` frees on MindSpore's CPU backend, per sample (docs/benchmarks.md "Memory knobs").

One process each (no msrun, graph mode, AdamW): a narrow ResNet-50 (width `--width`, `--image` px) whose memory is
mostly activations, trained 3 steps at each batch size of `--batches`, with and without `cell.recompute()` on every
bottleneck block. The resident set after the last step, against the batch size, gives the bytes each sample adds
(least squares) with and without recompute: their difference is what recompute drops per sample. ResNet's
BatchNorm updates its running statistics in training (a side effect), so MindSpore's compiler cannot recompute it
and keeps its outputs: the saving is a fraction of the activations.

    .venv/bin/python bench/bench_recompute_memory.py [--width 16] [--image 160] [--batches 8,16,32] [--json F]

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
from mindspore import nn
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
from workloads.resnet50.model import ResNet
net = ResNet((3, 4, 6, 3), width={width}, num_classes=10)
if {recompute}:
    for b in net.blocks:
        b.recompute()
opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3)
step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), opt)
x = ms.Tensor(np.random.rand({batch}, 3, {img}, {img}).astype(np.float32))
y = ms.Tensor(np.zeros({batch}, np.int32))
for i in range(3):
    t = time.perf_counter(); step(x, y).asnumpy(); dt = time.perf_counter() - t
print("RESULT", int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE"), dt)
"""


def probe(width: int, img: int, batch: int, recompute: bool) -> dict:
    code = PROBE.format(root=str(ROOT), width=width, img=img, batch=batch, recompute=recompute)
    with tempfile.TemporaryDirectory() as tmp:  # graph mode compiles from source files; MindSpore writes rank_0/ here
        script = Path(tmp) / "probe.py"
        script.write_text(code)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1800, cwd=tmp)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        raise SystemExit(f"probe batch {batch} recompute {recompute} failed: {(out.stderr or out.stdout)[-400:]}")
    _, rss, last = line.split()
    return {"batch": batch, "recompute": recompute, "rss_mb": int(rss) / 2**20, "step_s": float(last)}


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y on x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--image", type=int, default=160)
    ap.add_argument("--batches", default="8,16,32")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    rows = [probe(args.width, args.image, b, rc) for b in batches for rc in (False, True)]
    print(f"width {args.width}, {args.image}x{args.image}, graph mode, AdamW, resident MB after 3 steps")
    print("| batch | no recompute MB | recompute MB | freed MB | step s (no / with) |")
    print("|---|---|---|---|---|")
    for b in batches:
        a, r = (next(x for x in rows if x["batch"] == b and x["recompute"] is rc) for rc in (False, True))
        print(
            f"| {b} | {a['rss_mb']:.0f} | {r['rss_mb']:.0f} | {a['rss_mb'] - r['rss_mb']:.0f} | "
            f"{a['step_s']:.2f} / {r['step_s']:.2f} |"
        )
    per = {rc: slope([(x["batch"], x["rss_mb"]) for x in rows if x["recompute"] is rc]) for rc in (False, True)}
    print(
        f"per sample: {per[False]:.1f} MB without recompute, {per[True]:.1f} MB with: recompute drops "
        f"{per[False] - per[True]:.1f} MB ({(per[False] - per[True]) / per[False]:.0%})"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "mb_per_sample": {str(k): v for k, v in per.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
