"""Benchmark: the CPU time of fp16 gradient compression's casts on MindSpore's CPU backend.

    .venv/bin/python bench/bench_cpu_cast.py

Casts a float32 tensor to float16 and back (what `parallel.grad_compression: fp16` does around every bucket's
AllReduce, workloads/parallel/compression.py) for 64 Ki, 1 Mi and 4 Mi elements, 15 times each, and prints the
median wall and process CPU time per fp32 byte. The CPU time of the large tensors is
analyzers/analyses/advice/exposed_communication.py's CPU_CAST_NS_PER_BYTE (the wall time on a shared machine is
mostly waiting for a core).
"""

from __future__ import annotations

import statistics
import time

import mindspore as ms
import numpy as np
from mindspore import Tensor, ops


def main() -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    cast = ops.Cast()
    for n in (1 << 16, 1 << 20, 1 << 22):
        x = Tensor(np.random.default_rng(0).random(n, dtype=np.float32))
        for _ in range(3):
            cast(cast(x, ms.float16), ms.float32).asnumpy()
        wall, cpu = [], []
        for _ in range(15):
            t0, c0 = time.perf_counter(), time.process_time()
            cast(cast(x, ms.float16), ms.float32).asnumpy()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        b = 4 * n
        print(
            f"{n:>8} elements: wall {statistics.median(wall) / b * 1e9:.2f} ns/B (min {min(wall) / b * 1e9:.2f}), "
            f"CPU {statistics.median(cpu) / b * 1e9:.2f} ns/B"
        )


if __name__ == "__main__":
    main()
