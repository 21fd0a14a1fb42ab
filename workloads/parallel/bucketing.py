"""Gradient bucketing (``parallel.comm_fusion``) for hand-written data parallelism (``fusion_impl: perfbench``).

``comm_fusion`` is a bucket size in MB of the buffer sent: ``0`` = one AllReduce per tensor, ``"all"`` = one
fused buffer, anything in between = greedy buckets of at most that many MB (a tensor bigger than the bucket
gets a bucket of its own).  Tensors are taken in reverse parameter order, the order backward produces them.
Inside the compiled step every bucket is flattened into one buffer, all-reduced once, averaged and split back.
"""

from __future__ import annotations

import math

from perfbench.errors import ConfigError


def parse_fusion(value) -> float | None:
    """``0`` -> 0.0 (per tensor), ``"all"`` -> None (single buffer), ``x`` -> x MB."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v == "all":
            return None
        try:
            value = float(v)
        except ValueError:
            raise ConfigError(f"parallel.comm_fusion must be a bucket size in MB, 0 or 'all', got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"parallel.comm_fusion must be a bucket size in MB, 0 or 'all', got {value!r}")
    return float(value)


def plan_buckets(nbytes: list[int], comm_fusion) -> list[list[int]]:
    """Group tensor indices into buckets. ``nbytes[i]`` is the size tensor i adds to a bucket."""
    mb = parse_fusion(comm_fusion)
    order = list(range(len(nbytes)))[::-1]
    if not order:
        return []
    if mb is None:
        return [order]
    if mb == 0:
        return [[i] for i in order]
    cap = mb * 1024 * 1024
    buckets: list[list[int]] = []
    cur: list[int] = []
    cur_bytes = 0
    for i in order:
        if cur and cur_bytes + nbytes[i] > cap:
            buckets.append(cur)
            cur, cur_bytes = [], 0
        cur.append(i)
        cur_bytes += nbytes[i]
    if cur:
        buckets.append(cur)
    return buckets


# MindSpore's graph compiler unrolls Python loops in ``construct`` into nested calls: 161 gradient tensors
# exceed its call-depth limit and, with a raised limit, take ~90 s to compile.  So the reducer's
# ``construct`` is generated as straight-line code (a real .py file, the parser reads its source).

_GEN_DIR = None
_GEN_COUNT = 0


def compile_construct(lines: list[str], name: str = "construct"):
    """Turn generated source lines (a ``def construct(self, ...)``) into a function MindSpore can parse."""
    import atexit
    import importlib.util
    import os
    import shutil
    import sys
    import tempfile

    global _GEN_DIR, _GEN_COUNT
    if _GEN_DIR is None:
        _GEN_DIR = tempfile.mkdtemp(prefix=f"perfbench_gen_{os.getpid()}_")
        atexit.register(shutil.rmtree, _GEN_DIR, True)  # the generated sources are only needed while compiling
    _GEN_COUNT += 1
    mod_name = f"perfbench_gen_{os.getpid()}_{_GEN_COUNT}"
    path = os.path.join(_GEN_DIR, mod_name + ".py")
    with open(path, "w") as f:
        f.write("import mindspore as ms\nfrom mindspore import ops\n\n\n" + "\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def emit_concat(lines: list[str], target: str, tensors: list[str]) -> None:
    """Append the graph source that flattens `tensors` into one 1-D `target` (a bucket of several tensors)."""
    lines.append(f"    {target} = ops.concat((")
    for t in tensors:
        lines.append(f"        ops.reshape({t}, (-1,)),")
    lines.append("    ))")


def emit_bucket_allreduce(
    lines: list[str],
    ins: list[str],
    outs: list[str],
    shapes,
    buckets,
    *,
    tag: str,
    wire: str | None = None,
    scale: str | None = None,
    op: str = "self.allreduce",
    chain: list[str] | None = None,
    keep: set[int] | None = None,
) -> None:
    """Append straight-line code: ``outs[i] = allreduce(ins[i])`` in ``buckets`` (lists of indices).

    Every AllReduce is made to depend on the previous one (``chain`` carries the last result across calls):
    independent collectives may otherwise run in a different order on each rank and deadlock (seen on CPU:
    "Ring ReduceScatter wait receiving failed" after 30 s).

    ``keep``: only these tensors come out of their buckets (ZeRO-2, ``workloads/parallel/zero.py``): every bucket
    is still all-reduced whole (the other ranks need it), but the others' reduced gradients are never split out
    or scaled, so no tensor of theirs outlives the bucket's buffer; ``scale`` then applies to each kept slice
    (elementwise, so the values are the same as scaling the bucket first).
    """
    if chain is None:
        chain = []
    for k, b in enumerate(buckets):
        f = f"{tag}_f{k}"
        if len(b) == 1:  # a single tensor is all-reduced as it is: no flatten / split
            lines.append(f"    {f} = {ins[b[0]]}")
        else:
            emit_concat(lines, f, [ins[i] for i in b])
        if chain:
            lines.append(f"    {f} = ops.depend({f}, {chain[-1]})")
        if wire:
            lines.append(f"    {f} = ops.cast({op}(ops.cast({f}, {wire})), ms.float32)")
        else:
            lines.append(f"    {f} = {op}({f})")
        chain.append(f)
        if keep is not None:
            off = 0
            for i in b:
                n = int(math.prod(shapes[i]))
                if i in keep:
                    part = f if len(b) == 1 else f"ops.reshape({f}[{off}:{off + n}], {tuple(shapes[i])})"
                    lines.append(f"    {outs[i]} = {part} * {scale}" if scale else f"    {outs[i]} = {part}")
                off += n
            continue
        if scale:
            lines.append(f"    {f} = {f} * {scale}")
        if len(b) == 1:
            lines.append(f"    {outs[b[0]]} = {f}")
        else:
            off = 0
            for i in b:
                n = int(math.prod(shapes[i]))
                lines.append(f"    {outs[i]} = ops.reshape({f}[{off}:{off + n}], {tuple(shapes[i])})")
                off += n


def _build_cell():
    from mindspore import nn, ops

    # The class name becomes the op scope (Default/reducer-GradBuckets/...): it must not contain a collective's
    # name, or scope-matching analyzers would count its slices and casts as communication.
    class GradBuckets(nn.Cell):
        """All-reduce (mean) a tuple of tensors in the given buckets; optionally fp16 on the wire."""

        def __init__(self, shapes, buckets, world_size: int, comm_dtype=None, keep=None):
            super().__init__()
            shapes = [tuple(int(d) for d in s) for s in shapes]
            n = len(shapes)
            lines = ["def construct(self, grads):"]
            ins = [f"g{i}" for i in range(n)]
            for i in range(n):
                lines.append(f"    g{i} = grads[{i}]")
            outs = [f"o{i}" for i in range(n)]
            wire = "ms.float16" if comm_dtype is not None and str(comm_dtype) in ("Float16", "float16") else None
            if comm_dtype is not None and wire is None:
                raise ValueError(f"unsupported wire dtype {comm_dtype}")
            chain: list[str] = []
            emit_bucket_allreduce(
                lines,
                ins,
                outs,
                shapes,
                buckets,
                tag="b",
                wire=wire,
                scale="self.scale" if world_size > 1 else None,
                chain=chain,
                keep=keep,
            )
            if keep is None:
                lines.append("    return (" + ", ".join(outs) + ",)")
            else:  # the kept tensors in index order; the last all-reduce stays in the graph even if nothing is kept
                kept = [outs[i] for i in sorted(keep)]
                lines.append(f"    return ops.depend(({', '.join(kept)},), {chain[-1]})")
            self._construct = compile_construct(lines)
            self.scale = 1.0 / float(world_size)
            self.allreduce = ops.AllReduce()

        def construct(self, grads):
            return self._construct(self, grads)

    return GradBuckets


_CELL = None


def BucketAllReduce(shapes, buckets, world_size: int, comm_dtype=None, keep=None):
    """Factory for the MindSpore Cell (keeps this module importable without MindSpore).  With ``keep`` (a set of
    tensor indices) the cell returns only those tensors, in index order."""
    global _CELL
    if _CELL is None:
        _CELL = _build_cell()
    return _CELL(shapes, buckets, world_size, comm_dtype, keep)
