"""What perfbench's capture costs a user's PyTorch script (perfbench/capture/torch_capture.py): the optimizer
step hook, the outermost module's forward pre-hook and the per-step record (memory sample, one JSON line,
flush + fsync), against the step time of examples/own-job/train_pytorch.py's model (MLP 64-256-256-10, batch 32,
SGD with momentum, one process, CPU), side by side in one process.

Cycles of `--block` steps without capture, then `--block` steps with it (hooks installed, a Recorder writing into
a temporary run folder, profiler off), the order flipping every cycle. A step's wall time runs from one step's
start to the next one's, so the record written after the step is inside it. Per cycle: median with / median
without - 1; reported: the median over cycles, its quartiles, and the direct cost of the record write per step.

    .venv/bin/python bench/bench_script_capture.py --cycles 20 --block 20 [--hidden 256 --batch 32] [--json FILE]

`--hidden` and `--batch` size the model (the examples' `knobs.hidden` and `train.batch_size`): larger steps, the
same capture work per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    from torch import nn

    from perfbench.capture import torch_capture
    from perfbench.capture.recorder import Recorder

    torch.manual_seed(0)
    torch.set_num_threads(1)
    h = a.hidden
    net = nn.Sequential(nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(a.batch, 64), torch.randint(0, 10, (a.batch,))

    def block(n: int) -> list[float]:
        times, t = [], time.perf_counter()
        for _ in range(n):
            loss = loss_fn(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            now = time.perf_counter()
            times.append(now - t)
            t = now
        return times

    block(50)  # warm-up
    tmp = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    cfg = {"run_id": "bench", "world_size": 1, "output_dir": str(tmp), "train": {"warmup_steps": 0}}
    ratios, bare_all, cap_all = [], [], []
    for c in range(a.cycles):
        res = {}
        for side in ("bare", "capture") if c % 2 == 0 else ("capture", "bare"):
            if side == "capture":
                rec = Recorder(cfg, rank=0)
                rec.profile_window = lambda: None  # type: ignore[method-assign]
                uninstall = torch_capture.install(rec)
                res[side] = block(a.block)[1:]  # the first step of a block starts before the hooks' first boundary
                uninstall()
                rec.finish(0)
            else:
                res[side] = block(a.block)[1:]
        b, k = statistics.median(res["bare"]), statistics.median(res["capture"])
        ratios.append(k / b - 1)
        bare_all += res["bare"]
        cap_all += res["capture"]
    rec = Recorder(cfg, rank=0)
    writes = []
    for _ in range(200):
        rec.begin()
        t0 = time.perf_counter()
        rec.end(samples=a.batch)
        writes.append(time.perf_counter() - t0)
    rec.finish(0)
    q = statistics.quantiles(ratios, n=4)
    out = {
        "step_ms_bare": statistics.median(bare_all) * 1e3,
        "step_ms_capture": statistics.median(cap_all) * 1e3,
        "overhead_median": statistics.median(ratios),
        "overhead_q1": q[0],
        "overhead_q3": q[2],
        "record_write_us": statistics.median(writes) * 1e6,
        "record_share_of_bare_step": statistics.median(writes) / statistics.median(bare_all),
        "load_average_1min": os.getloadavg()[0],
        "hidden": a.hidden,
        "batch": a.batch,
        "cycles": a.cycles,
        "block": a.block,
        "torch": torch.__version__,
    }
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
