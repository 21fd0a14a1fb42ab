"""The advice rules' records (analyzers/analyses/advice/: one module per rule, each declaring `RULE`): the docs'
generated tables are the ones the records give (docs/advice.md's rule records and gains, docs/analyzers.md's
thresholds), every module of the package that declares a rule is in RULES under its own name, every fold names a
finding some rule emits and the folds form no cycle, thresholds are the module's own constants, the reference
bandwidths are the hardware catalogue's, no rule id is written as a string outside its own module (and the tests),
and the package keeps small modules and functions."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from analyzers.analyses import advice as A
from analyzers.analyses.advice import docs as D
from analyzers.analyses.advice import engine as E

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "analyzers" / "analyses" / "advice"
IDS = [rule.id for rule in A.RULES]


@pytest.mark.parametrize("doc,name", D.BLOCKS)
def test_docs_generated_tables_match_the_records(doc, name):
    block = D.block((ROOT / "docs" / doc).read_text(), name)
    assert block is not None, f"docs/{doc} lacks the <!-- {name}:begin --> ... <!-- {name}:end --> markers"
    assert block == D.generated(A.RULES)[(doc, name)], (
        f"docs/{doc}'s {name} table differs from the rule records: regenerate it with "
        "`python -m analyzers.analyses.advice --write`"
    )


def test_every_rule_module_is_a_rule_under_its_own_name():
    declared = sorted(
        p.stem for p in PKG.glob("*.py") if re.search(r"^RULE = Rule\(", p.read_text(), flags=re.MULTILINE)
    )
    assert sorted(IDS) == declared
    assert len(IDS) == len(set(IDS))
    for rule in A.RULES:
        mod = importlib.import_module(f"analyzers.analyses.advice.{rule.id}")
        assert mod.RULE is rule and mod.ID == rule.id and rule.find.__module__ == mod.__name__
        assert rule.needs and rule.fires and rule.gain, rule.id


def test_records_are_consistent():
    for rule in A.RULES:
        mod = importlib.import_module(f"analyzers.analyses.advice.{rule.id}")
        for name, value in rule.thresholds.items():
            assert name.isupper() and getattr(mod, name) == value, (rule.id, name)
        for f in rule.folds:
            assert f.cause in IDS, (rule.id, f.cause)
        assert all(k.count(".") == 1 for k in rule.knobs), rule.id
    assert set(E.fold_order(set(IDS), A.FOLDS)) == set(IDS)


def test_a_try_outside_the_rules_knobs_is_refused():
    rule = A.Rule(id="r", find=lambda t, s: [{"try": {"parallel.x": 1}}], needs=("t",), fires="f", gain="g")
    with pytest.raises(ValueError, match="parallel.x"):
        E.collect([rule], {}, {})


def test_a_rule_sees_only_the_tables_it_needs():
    seen = []
    rule = A.Rule(id="r", find=lambda t, s: seen.append(sorted(t)) or [], needs=("a", "c"), fires="f", gain="g")
    E.collect([rule], {"a": 1, "b": 2}, {})
    assert seen == [["a"]]


def test_idle_imbalance_follows_free_time_to_its_root():
    """free_time folded under the stage imbalance (the slowest stage's idle time inside the pipeline window): the free
    rank_imbalance goes with it to the stage imbalance, not under a symptom."""
    rows = [
        {"id": "stage", "rule": "stage_imbalance", "gain_ms": 10.0, "ranks": [2, 3]},
        {"id": "free", "rule": "free_time", "gain_ms": 5.0, "ranks": [2], "in_pipeline": True},
        {"id": "ri", "rule": "rank_imbalance", "gain_ms": 1.0, "ranks": [2, 3], "explains": "idle"},
    ]
    A.link(rows)
    assert {r["id"]: r["symptom_of"] for r in rows} == {"stage": None, "free": "stage", "ri": "stage"}


def test_reference_bandwidths_are_the_hardware_catalogues():
    from analyzers.analyses.advice.bandwidth_reference import REFERENCE_BANDWIDTH_GBPS
    from perfbench.predict.hardware import load

    ref = load("ascend910").reference_bandwidth_gbps
    assert REFERENCE_BANDWIDTH_GBPS == {k.upper(): v for k, v in ref.items()}
    assert REFERENCE_BANDWIDTH_GBPS["HCCS"] == 18.0 and REFERENCE_BANDWIDTH_GBPS["PCIE"] == 20.0


#: rule ids that are also the name of a table, a column or a metric elsewhere (the rank_imbalance table of
#: analyzers.analyses.imbalance, comm_ops' wait_ratio column, the MoE dropped_tokens metric): outside the advice
#: package those strings name that, not the rule; inside it only the time budget reads the rank_imbalance table
HOMONYMS = {"rank_imbalance", "wait_ratio", "dropped_tokens"}


def _strings(tree: ast.AST):
    """Every string constant of a module (f-string parts included), docstrings left out."""
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node


def test_no_rule_id_is_written_outside_its_own_module():
    """A rule id as a string (or a word of one) appears only in its own module: the engine and the other rules name
    a rule through its module's ID, so renaming a rule is one module."""
    words = re.compile(r"\b(" + "|".join(map(re.escape, IDS)) + r")\b")
    bad = []
    for top in ("analyzers", "perfbench", "dashboards", "workloads", "bench", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            in_pkg = path.parent == PKG
            for node in _strings(ast.parse(path.read_text(), rel)):
                for rid in set(words.findall(node.value)):
                    if in_pkg and path.stem == rid:
                        continue
                    if rid in HOMONYMS and (not in_pkg or (path.stem == "budget" and node.value == rid)):
                        continue
                    bad.append(f"{rel}:{node.lineno}: {rid!r} in {node.value[:60]!r}")
    assert not bad, "rule ids written outside their module:\n" + "\n".join(bad)


def test_modules_and_functions_stay_small():
    for path in sorted(PKG.glob("*.py")):
        text = path.read_text()
        assert len(text.splitlines()) < 600, path.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno - node.lineno + 1 < 100, f"{path.name}:{node.name}"
