"""The import layers (docs/architecture.md, "Layers"), checked by walking every module's AST, imports inside
functions included: a module may import its own layer and the layers its layer lists in ALLOWED, nothing else.

    base       perfbench (the package), perfbench.errors, perfbench.startup: import nothing of the project
    planning   workloads.parallel.{rules,schedules,bucketing,layout_math}: pure parallel planners (no MindSpore at
    import)
    capture    perfbench.capture.* (a training script's step capture; frameworks only inside functions): base only
    workloads  the rest of workloads/ (MindSpore): base, planning and capture
    analyzers  analyzers/: base and planning (parsers, schema, analyses, catalogue)
    core       the rest of perfbench/ (store, runs, compare/check, tune, predict, views)
    top        perfbench.cli, perfbench.__main__, perfbench.commands.*, dashboards.*

Also: no import cycle between modules (an import inside a function is still an edge), so no cycle can hide there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("perfbench", "analyzers", "workloads", "dashboards")
BASE = {"perfbench", "perfbench.errors", "perfbench.startup"}
PLANNING = {
    "workloads.parallel.rules",
    "workloads.parallel.schedules",
    "workloads.parallel.bucketing",
    "workloads.parallel.layout_math",
}
TOP = ("perfbench.cli", "perfbench.__main__", "perfbench.commands", "dashboards")
ALLOWED = {
    "base": {"base"},
    "planning": {"base", "planning"},
    "capture": {"base", "capture"},
    "workloads": {"base", "planning", "capture", "workloads"},
    "analyzers": {"base", "planning", "analyzers"},
    "core": {"base", "planning", "analyzers", "capture", "core"},
    "top": {"base", "planning", "analyzers", "capture", "core", "top"},
}


def layer_of(module: str) -> str:
    if module in BASE:
        return "base"
    if module in PLANNING:
        return "planning"
    if module == "perfbench.capture" or module.startswith("perfbench.capture."):
        return "capture"
    if any(module == t or module.startswith(t + ".") for t in TOP):
        return "top"
    return {"workloads": "workloads", "analyzers": "analyzers", "perfbench": "core"}[module.split(".")[0]]


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(module: str, source: str, known: set[str], is_pkg: bool = False) -> list[tuple[str, int]]:
    """(project module, line) of every import in `source`, inside functions too; `from p import name` counts as
    an import of p.name when that is a module, else of p."""

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                here = parts if is_pkg else parts[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for n in names:
            r = resolve(n)
            if r and r != module:
                out.append((r, node.lineno))
    return out


def graph(root: Path = ROOT) -> dict[str, list[tuple[str, int]]]:
    mods = modules(root)
    return {m: imports(m, p.read_text(), set(mods), p.name == "__init__.py") for m, p in mods.items()}


def violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for m, targets in sorted(edges.items()):
        for t, line in targets:
            if layer_of(t) not in ALLOWED[layer_of(m)] and not t.startswith(m + "."):
                bad.append(
                    f"{m}:{line} imports {t} ({layer_of(m)} may import {', '.join(sorted(ALLOWED[layer_of(m)]))}"
                    f"; {t} is {layer_of(t)})"
                )
    return bad


def cycles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan). A package's __init__ importing its own
    submodules is not a cycle with them (Python imports the package first)."""
    g = {m: sorted({t for t, _ in ts if not t.startswith(m + ".") and t in edges}) for m, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_import_follows_the_layers():
    bad = violations(graph())
    assert bad == [], "\n".join(bad)


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_every_module_has_a_layer():
    mods = modules()
    assert len(mods) > 100
    assert {layer_of(m) for m in mods} == set(ALLOWED)
    assert PLANNING | BASE <= set(mods), sorted((PLANNING | BASE) - set(mods))


def test_the_planners_import_no_mindspore_at_module_level():
    """The pure planners are imported by config validation, predict and the workloads: MindSpore only inside
    functions (bucketing builds its MindSpore Cell in a factory)."""
    for m in sorted(PLANNING):
        tree = ast.parse(modules()[m].read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names] + [
            n.module or "" for n in top if isinstance(n, ast.ImportFrom)
        ]
        assert not [n for n in names if n.split(".")[0] == "mindspore"], (m, names)


@pytest.mark.parametrize(
    "module,source,culprit",
    [
        ("analyzers.analyses.kernels", "def f():\n    from perfbench.cli import main\n", "perfbench.cli"),
        ("analyzers.analyses.kernels", "import perfbench.commands.show\n", "perfbench.commands.show"),
        ("analyzers.schema", "from perfbench import store\n", "perfbench.store"),
        ("perfbench.errors", "from analyzers.schema import Profile\n", "analyzers.schema"),
        ("workloads.parallel.rules", "from workloads.parallel import pipeline\n", "workloads.parallel.pipeline"),
        ("workloads.runner", "from analyzers import load_profile\n", "analyzers"),
        ("perfbench.store", "from dashboards.data import DashData\n", "dashboards.data"),
    ],
)
def test_the_checker_catches_a_synthetic_violation(module, source, culprit):
    """One module's source replaced by a wrong import: the checker names it (and is silent without it)."""
    edges = graph()
    known = set(edges)
    fake = dict(edges)
    fake[module] = imports(module, source, known)
    bad = violations(fake)
    assert len(bad) == 1 and bad[0].startswith(f"{module}:") and f"imports {culprit} " in bad[0], bad


def test_the_checker_catches_a_synthetic_cycle():
    edges = graph()
    fake = dict(edges)
    fake["analyzers.schema"] = edges["analyzers.schema"] + imports(
        "analyzers.schema", "def f():\n    from analyzers.analyses.breakdown import analysis\n", set(edges)
    )
    assert cycles(edges) == []
    assert any({"analyzers.analyses.breakdown", "analyzers.schema"} <= set(c) for c in cycles(fake)), cycles(fake)


def test_relative_imports_resolve():
    known = {
        "analyzers",
        "analyzers.parsers.ascend",
        "analyzers.parsers.ascend.db",
        "analyzers.parsers.ascend.common",
        "perfbench.cli",
    }
    assert imports("analyzers.parsers.ascend.db", "from .common import x\nfrom ..schema import y\n", known) == [
        ("analyzers.parsers.ascend.common", 1),
        ("analyzers", 2),
    ]


# ---- the analyzers' inner layers ----------------------------------------------------------------------------------

#: analyzers/ inside: parsers -> schema -> analyses (docs/architecture.md, "Layers"). The schema sub-layer is what
#: both sides share (tables, the catalogue, statistics, the parallel groups as the profilers name them); the facade
#: (the package, `analyze()`, `analyze --json`'s document) may import all three.
ANALYZERS_SCHEMA = {
    "analyzers.schema",
    "analyzers.catalogue",
    "analyzers.metric",
    "analyzers.metric_definitions",
    "analyzers.stats",
    "analyzers.groups",
    "analyzers.memory_summary",
}
ANALYZERS_FACADE = {"analyzers", "analyzers.analyze", "analyzers.report"}
SUBLAYER_ALLOWED = {
    "schema": {"schema"},
    "parsers": {"schema", "parsers"},
    "analyses": {"schema", "analyses"},
    "facade": {"schema", "parsers", "analyses", "facade"},
}
#: (importer, imported) edges against the sub-layers, each with why it is still there (none today)
SUBLAYER_PENDING: dict[tuple[str, str], str] = {}


def sublayer_of(module: str) -> str:
    if module in ANALYZERS_SCHEMA:
        return "schema"
    if module in ANALYZERS_FACADE:
        return "facade"
    if module.startswith("analyzers.parsers"):
        return "parsers"
    return "analyses"  # analyzers.analyses.*, the registry and the analyses' context


def sublayer_violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    bad = []
    for m, targets in sorted(edges.items()):
        if not m.startswith("analyzers"):
            continue
        for t, line in targets:
            if not t.startswith("analyzers") or (m, t) in SUBLAYER_PENDING:
                continue
            if sublayer_of(t) not in SUBLAYER_ALLOWED[sublayer_of(m)]:
                may = ", ".join(sorted(SUBLAYER_ALLOWED[sublayer_of(m)]))
                bad.append(f"{m}:{line} imports {t} ({sublayer_of(m)} may import {may}; {t} is {sublayer_of(t)})")
    return bad


def test_the_analyzers_sublayers_are_kept():
    edges = graph()
    assert sublayer_violations(edges) == [], "\n".join(sublayer_violations(edges))
    assert all(t in {x for x, _ in edges[m]} for m, t in SUBLAYER_PENDING), "a pending edge is gone: drop it"


@pytest.mark.parametrize(
    "module,source",
    [
        ("analyzers.parsers.load", "from analyzers.analyses.parallel_groups import rank_stages\n"),
        ("analyzers.analyses.comm_exposure", "def f():\n    from analyzers.parsers.ascend.common import x\n"),
        ("analyzers.schema", "from analyzers.context import Output\n"),
    ],
)
def test_the_sublayer_checker_catches_a_synthetic_violation(module, source):
    edges = graph()
    fake = dict(edges)
    fake[module] = imports(module, source, set(edges))
    bad = sublayer_violations(fake)
    assert len(bad) == 1 and bad[0].startswith(f"{module}:"), bad


# ---- imports at the top ------------------------------------------------------------------------------------------

#: a project import inside a function is there to defer a heavy library: allowed when the imported module brings
#: (at its top, directly or through the project modules it imports at their top) a heavy library that the importing
#: module does not. That covers the CLI's one deferral (a command's `run` imports its implementation, which
#: imports pandas & co.; docs/architecture.md, "Heavy libraries") and the workloads' MindSpore modules.
HEAVY = ("pandas", "numpy", "pyarrow", "duckdb", "scipy", "mindspore", "torch", "dash", "plotly", "optuna")
#: the other function-level project imports, each with its reason
FUNCTION_IMPORTS_ALLOWED = {
    # the CLI's one deferral: a command's `run` imports its implementation (docs/architecture.md, "Heavy
    # libraries"): a command line imports that command's module alone, and its top only light modules
    "perfbench.commands": "the CLI's per-command deferral",
    # the Ascend format entries load their parser on first use (a format registry of names, docs/analyzers.md)
    "analyzers.parsers.ascend.formats": "lazy format registry",
    # the memory rule sizes ZeRO/recompute options with the workloads' layout arithmetic, only when it proposes one
    # (analyzers may not import workloads at module level: test_import_boundaries.py)
    "analyzers.analyses.advice.memory_near_capacity": "knob options from workloads' layout math",
}


def _top_level_nodes(tree: ast.Module):
    """The statements that run at import (module level, inside if/try at module level; not `if TYPE_CHECKING`)."""
    todo = list(tree.body)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            todo.extend(n.orelse)
            continue
        if isinstance(n, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(getattr(n, field, []) or [])
            continue
        if isinstance(n, ast.ExceptHandler):
            todo.extend(n.body)
            continue
        yield n


def import_split(root: Path = ROOT):
    """({module: top-level project imports}, {module: top-level third-party roots}, {module: [(line, target)] of
    project imports inside functions})."""
    mods = modules(root)
    known = set(mods)
    top: dict[str, set[str]] = {}
    third: dict[str, set[str]] = {}
    inner: dict[str, list[tuple[int, str]]] = {}
    for m, path in mods.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"
        top[m], third[m], inner[m] = set(), set(), []
        for n in _top_level_nodes(tree):
            if isinstance(n, ast.Import):
                third[m] |= {a.name.split(".")[0] for a in n.names}
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                third[m].add(n.module.split(".")[0])
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                top[m] |= {t for t, _ in imports(m, ast.unparse(n), known, is_pkg)}
        for f in ast.walk(tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for n in f.body:
                    for s in ast.walk(n):
                        if isinstance(s, (ast.Import, ast.ImportFrom)):
                            inner[m] += [(s.lineno, t) for t, _ in imports(m, ast.unparse(s), known, is_pkg)]
    return top, third, {m: sorted(set(v)) for m, v in inner.items() if v}


def heavy_at_import(top: dict[str, set[str]], third: dict[str, set[str]]) -> dict[str, set[str]]:
    """{module: the heavy libraries importing it loads} (its own top-level imports and its project imports')."""
    memo: dict[str, set[str]] = {}

    def of(m: str, seen: frozenset = frozenset()) -> set[str]:
        if m not in memo:
            own = third.get(m, set()) & set(HEAVY)
            for t in top.get(m, ()):
                if t not in seen:
                    own |= of(t, seen | {m})
            parent = m.rpartition(".")[0]  # importing a.b imports the package a first
            if parent and parent in top and parent not in seen:
                own |= of(parent, seen | {m})
            memo[m] = own
        return memo[m]

    return {m: of(m) for m in top}


def function_import_violations(root: Path = ROOT, allowed=FUNCTION_IMPORTS_ALLOWED) -> list[str]:
    top, third, inner = import_split(root)
    heavy = heavy_at_import(top, third)
    bad = []
    for m, items in sorted(inner.items()):
        if any(m == a or m.startswith(a + ".") for a in allowed):
            continue
        for line, t in items:
            if not heavy[t] - heavy[m]:
                bad.append(
                    f"{m}:{line} imports {t} inside a function (it defers no heavy library: import it at the top)"
                )
    return bad


def test_project_imports_sit_at_the_top_unless_they_defer_a_heavy_library():
    bad = function_import_violations()
    assert bad == [], f"{len(bad)}:\n" + "\n".join(bad)


def test_the_function_import_allow_list_is_short_and_current():
    _, _, inner = import_split()
    assert len(FUNCTION_IMPORTS_ALLOWED) <= 12
    stale = [a for a in FUNCTION_IMPORTS_ALLOWED if not any(m == a or m.startswith(a + ".") for m in inner)]
    assert stale == [], stale


def test_a_command_defers_its_implementation_and_a_needless_inner_import_is_caught(tmp_path):
    """A command's `run` importing the store (pandas) is the CLI's deferral; a pandas module importing another
    pandas module inside a function is not."""
    top, third, inner = import_split()
    heavy = heavy_at_import(top, third)
    assert "pandas" in heavy["perfbench.store"] and "pandas" not in heavy["perfbench.commands.show"]
    assert heavy["analyzers.analyses.breakdown"] >= {"pandas"} and heavy["analyzers.schema"] >= {"pandas"}
