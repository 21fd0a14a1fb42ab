"""The ranked advice of every shared fixture set the advice tests read, as a small comparable record: per set the
root findings in order (id, gain rounded to 0.01 ms, knob) with the ids folded under each. A characterization: it
was taken from the advice engine before it was split into one module per rule, and
tests/golden/test_advice_snapshot.py checks that the engine still gives the same.

Regenerate (only when a change to the advice is meant):

    .venv/bin/python -m tests.support.advice_snapshot      # rewrites tests/golden/advice_top_findings.json
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support import fixture_path, kineto_path
from tests.support.golden import analyze_json

EXPECTED = Path(__file__).resolve().parents[1] / "golden" / "advice_top_findings.json"

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
C = ("Ascend__msinsight", "test", "data", "pytorch", "db")
E = ("Ascend__msprof-analyze", "test", "resource", "advisor", "cluster_analysis_output")
F = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler")
G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")
H = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "run_1", "normal_run", "profiler")

KINETO = ("trace_filter", "nccl_parser_config", "ns_resolution_trace", "cpu_only", "amd_trace")

#: case name -> ("ascend" | "kineto", path parts)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    **{f"B-level{n}": ("ascend", B + (f"level{n}",)) for n in (0, 1, 2)},
    **{f"C-level{n}": ("ascend", C + (f"level{n}",)) for n in (0, 1, 2)},
    "E": ("ascend", E),
    "F": ("ascend", F),
    "G": ("ascend", G),
    "H": ("ascend", H),
    **{f"kineto-{s}": ("kineto", (s,)) for s in KINETO},
}


def _source(tmp: Path, name: str) -> Path:
    kind, parts = CASES[name]
    if kind == "kineto":
        return kineto_path(*parts)
    d = tmp / name
    if name == "F":  # the two PROF_* jobs alone (the folder also holds other runs' legacy files)
        d.mkdir(parents=True)
        for job in sorted(p for p in fixture_path(*parts).iterdir() if p.name.startswith("PROF_")):
            shutil.copytree(job, d / job.name)
    else:
        shutil.copytree(fixture_path(*parts), d)
    return d


def ranked(advice: list[dict]) -> list[dict]:
    """The roots in their ranked order, each with its gain (0.01 ms), knob and the ids folded under it."""
    out = []
    for a in advice:
        if a["symptom_of"] is not None:
            continue
        g = a.get("gain_ms")
        out.append(
            {
                "id": a["id"],
                "gain_ms": None if g is None else round(float(g), 2),
                "try": a.get("try"),
                "symptoms": [s["id"] for s in advice if s["symptom_of"] == a["id"]],
            }
        )
    return out


def snapshot(name: str, tmp: Path) -> list[dict]:
    return ranked(analyze_json(_source(tmp, name))["advice"])


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc = {name: snapshot(name, Path(tmp)) for name in CASES}
    EXPECTED.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {EXPECTED}: {sum(len(v) for v in doc.values())} roots over {len(doc)} sets")


if __name__ == "__main__":
    main()
