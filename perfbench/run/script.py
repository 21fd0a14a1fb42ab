"""`workload: script`: the user's own training script (docs/workloads.md, "Your own job").

Templates: `script.args` and `script.env` may hold `{placeholders}` over the run's settings, resolved per run:
`{world_size}`, `{repeat}`, `{run_id}`, `{train.KEY}`, `{parallel.KEY}`, `{profile.KEY}`, `{knobs.NAME}`
(`{{` and `}}` are literal braces). The rules say which `parallel.*` knobs a script can be given on this
machine (the rest is refused at `--dry-run`, with the reason). The launch commands: msrun for MindSpore,
torchrun for PyTorch, each rank started in the capture bootstrap (perfbench/capture/run.py).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from perfbench.capture.parallel import ALL_MB, pytorch_refusals
from perfbench.errors import ConfigError, UserError

BOOTSTRAP = Path(__file__).resolve().parents[1] / "capture" / "run.py"
FRAMEWORKS = ("mindspore", "pytorch")
_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")


def placeholder_values(run_config: dict) -> dict[str, Any]:
    """Every name a template may use, with this run's value. `{parallel.comm_fusion}` is a bucket size in MB (0: one
    collective per parameter); `all` (one bucket, what `advise` tries for many small all-reduces) is handed to the
    script as the number of MB that holds any model (capture.parallel.ALL_MB), which an `--bucket-mb` argument takes."""
    out: dict[str, Any] = {k: run_config.get(k) for k in ("world_size", "repeat", "run_id")}
    for section in ("train", "parallel", "profile", "knobs"):
        for k, v in (run_config.get(section) or {}).items():
            out[f"{section}.{k}"] = v
    if out.get("parallel.comm_fusion") == "all":
        out["parallel.comm_fusion"] = ALL_MB
    return out


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def resolve(template: Any, values: dict[str, Any], where: str) -> str:
    """One template with this run's values; an unknown placeholder is a ConfigError naming `where`."""
    import difflib

    text = _text(template)

    def sub(m: re.Match) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        name = m.group(1).strip()
        if name not in values:
            close = difflib.get_close_matches(name, list(values), n=1)
            hint = f" (did you mean `{{{close[0]}}}`?)" if close else ""
            raise ConfigError(
                f"{where}: unknown placeholder {{{name}}} in {text!r}{hint}; placeholders are world_size, repeat, "
                "run_id and train.KEY, parallel.KEY, profile.KEY, knobs.NAME"
            )
        v = values[name]
        return "" if v is None else _text(v)

    return _FIELD.sub(sub, text)


def resolve_script(script: dict, run_config: dict) -> dict:
    """The run's `script` section: args and env resolved (templates kept beside them for the record)."""
    values = placeholder_values(run_config)
    args = [resolve(a, values, f"script.args[{i}]") for i, a in enumerate(script.get("args") or [])]
    env = {str(k): resolve(v, values, f"script.env.{k}") for k, v in (script.get("env") or {}).items()}
    return {
        **script,
        "args": args,
        "env": env,
        "args_template": script.get("args") or [],
        "env_template": script.get("env") or {},
    }


def script_source(resolved: dict) -> dict:
    """The `script:` section a run's resolved one came from (templates back in place): to plan it again."""
    return {
        "path": resolved["path"],
        "framework": resolved["framework"],
        "args": list(resolved.get("args_template", resolved.get("args") or [])),
        "env": dict(resolved.get("env_template", resolved.get("env") or {})),
    }


def script_path(raw: str, base: Path) -> str:
    """`script.path` (relative to the sweep file's folder) as an absolute path; a ConfigError when it is missing."""
    p = Path(raw).expanduser()
    p = p if p.is_absolute() else (base / p)
    if not p.is_file():
        raise ConfigError(f"script.path: {raw!r} does not exist (looked for {p.resolve()})")
    return str(p.resolve())


def script_rules(framework: str, parallel: dict, world_size: int) -> list[str]:
    """The `parallel.*` knobs a script cannot be given on this machine, each with the reason."""
    problems = []
    gc = parallel.get("grad_compression", "none")
    if parallel.get("tensor_parallel", 1) > 1:
        problems.append(
            "parallel.tensor_parallel > 1: not handed to a script; MindSpore's semi-auto parallel needs Ascend/GPU "
            "(the CPU backend refuses it), and a PyTorch script builds its own tensor-parallel layers"
        )
    if parallel.get("pipeline_stages", 1) > 1 and framework != "pytorch":
        problems.append(
            "parallel.pipeline_stages > 1: not handed to a MindSpore script; MindSpore's native pipeline needs "
            "Ascend/GPU (the CPU backend refuses it)"
        )
    if framework == "pytorch":  # zero_stage 1 and micro_batches: perfbench.capture.parallel's helpers
        problems += pytorch_refusals(parallel, world_size)
    elif parallel.get("zero_stage", 0):
        zero = parallel["zero_stage"]
        problems.append(f"parallel.zero_stage {zero}: MindSpore's optimizer sharding runs on Ascend only")
    if parallel.get("micro_batches", 1) > 1 and framework != "pytorch":
        problems.append(
            "parallel.micro_batches > 1: not handed to a MindSpore script (MindSpore's GradAccumulation needs "
            "Ascend/GPU)"
        )
    if parallel.get("overlap_grad_comm") and framework == "mindspore":
        problems.append("parallel.overlap_grad_comm: MindSpore overlaps a script's gradients by itself")
    if gc != "none" and framework == "mindspore":
        problems.append(
            f"parallel.grad_compression {gc}: MindSpore's data parallel has no native gradient compression "
            "(the reference workloads build their own)"
        )
    if gc == "topk" and framework == "pytorch":
        problems.append("parallel.grad_compression topk: PyTorch has no top-k DDP hook (fp16 and powersgd have one)")
    if gc != "none" and world_size == 1:
        problems.append(f"parallel.grad_compression {gc}: needs world_size >= 2 (DDP with one rank reduces nothing)")
    return problems


def settings_json(run_config: dict) -> str:
    """PERFBENCH_SETTINGS: what the script may read (perfbench.capture.settings())."""
    keys = ("run_id", "world_size", "repeat", "output_dir", "train", "parallel", "profile", "knobs", "inject")
    out = {k: run_config.get(k) for k in keys}
    out["script"] = {"framework": (run_config.get("script") or {}).get("framework")}
    return json.dumps(out, default=str)


def executable(name: str, install: str) -> str:
    """The launcher `name` (msrun, torchrun) beside this interpreter, else on PATH; `install` says how to get it."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise UserError(f"{name} not found: {install}")
    return found


def torchrun_executable() -> str:
    return executable("torchrun", "install the PyTorch extra (`pip install -e '.[pytorch]'`)")


def torchrun_command(
    local_ranks: int,
    master_port: int,
    script: dict,
    *,
    master_addr: str = "127.0.0.1",
    nodes: int = 1,
    node_rank: int = 0,
) -> list[str]:
    """torchrun's static rendezvous: `nodes` nodes of `local_ranks` ranks each, node 0's address as master."""
    return [
        torchrun_executable(),
        f"--nnodes={nodes}",
        f"--node_rank={node_rank}",
        f"--nproc_per_node={local_ranks}",
        f"--master_addr={master_addr}",
        f"--master_port={master_port}",
        str(BOOTSTRAP),
        script["path"],
        *script["args"],
    ]


def interface_towards(address: str) -> str | None:
    """The name of this machine's network interface that reaches `address` (the route the kernel picks), or None.
    gloo otherwise takes the address the host name resolves to, which is 127.0.0.1 on many machines: a torchrun
    rank on another node would then be told to connect to its own loopback."""
    import socket

    import psutil

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))  # UDP: no packet is sent, the kernel only picks the route
            local = s.getsockname()[0]
        for name, addrs in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == local for a in addrs):
                return name
    except OSError:
        return None
    return None


def entry(script: dict) -> list[str]:
    """What msrun starts per rank for a MindSpore script."""
    return [str(BOOTSTRAP), script["path"], *script["args"]]
