"""Size limits, checked on the AST of every module of perfbench/, analyzers/, workloads/ and dashboards/: no function
over 100 lines and no module over 600 lines, outside the workloads' model definitions and a list of modules and
functions still to split (each named with why it is there). ruff's C901 (pyproject.toml) caps the branches of a
function the same way."""

from __future__ import annotations

import ast

from tests.unit.test_layers import modules

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 600

#: the workloads' model definitions: MindSpore Cells defined inside their factory functions (MindSpore is imported
#: inside functions, so a model's classes live in the function that builds them), exempt by design
MODEL_DEFINITIONS = {
    "workloads.moe.model:build_layers",
    "workloads.moe:__init__",
    "workloads.resnet50:__init__",
    "workloads.parallel.pipeline:__init__",
    "workloads.parallel.pipeline:train_step",
    "workloads.parallel.experts:build_expert_comm",
    "workloads.parallel.compression:_powersgd",
}

#: functions over the limit still to split, each with why it waits
PENDING_FUNCTIONS = {}

#: modules over the limit still to split
PENDING_MODULES = {}


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """({module: lines}, {"module:function": lines}) of every module and function (the longest of a name)."""
    mods, funcs = {}, {}
    for m, path in modules().items():
        src = path.read_text()
        mods[m] = len(src.splitlines())
        for f in ast.walk(ast.parse(src)):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{m}:{f.name}"
                funcs[key] = max(funcs.get(key, 0), f.end_lineno - f.lineno + 1)
    return mods, funcs


def test_no_function_over_the_limit():
    _, funcs = sizes()
    over = {k: n for k, n in funcs.items() if n > MAX_FUNCTION_LINES}
    bad = sorted(f"{k} ({n} lines)" for k, n in over.items() if k not in MODEL_DEFINITIONS | set(PENDING_FUNCTIONS))
    assert bad == [], f"functions over {MAX_FUNCTION_LINES} lines: split them\n" + "\n".join(bad)
    done = sorted(k for k in set(PENDING_FUNCTIONS) | MODEL_DEFINITIONS if k not in over)
    assert done == [], f"within the limit now (or gone): drop them from the lists: {done}"


def test_no_module_over_the_limit():
    mods, _ = sizes()
    over = {m: n for m, n in mods.items() if n > MAX_MODULE_LINES}
    bad = sorted(f"{m} ({n} lines)" for m, n in over.items() if m not in PENDING_MODULES)
    assert bad == [], f"modules over {MAX_MODULE_LINES} lines: split them\n" + "\n".join(bad)
    done = sorted(m for m in PENDING_MODULES if m not in over)
    assert done == [], f"within the limit now (or gone): drop them from PENDING_MODULES: {done}"


def test_the_counter_counts_a_function_from_def_to_its_last_line():
    tree = ast.parse("def f():\n    x = 1\n\n    return x\n")
    f = tree.body[0]
    assert f.end_lineno - f.lineno + 1 == 4
