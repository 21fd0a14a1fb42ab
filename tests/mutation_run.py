"""`make mutation`: mutation testing of the metric and decision code with mutmut (docs/testing.md).

Runs `mutmut run` (modules, test selection and exclusions in pyproject.toml [tool.mutmut]) against the
fast tests, then writes mutation.json

    {"score", "killed", "survived", "total", "equivalent", "modules": [...],
     "survivors": [{"file", "line", "function", "mutant", "diff"}], "by_module": {...}}

and prints `mutation score: S (killed K of N)` as its last line. Reviewed equivalent mutants (a mutant
that no test can tell apart from the original, e.g. `float("nan")` -> `float("NAN")`) are listed in
tests/mutation_equivalent.txt, one per line, `file :: - original line :: + mutated line :: reason`;
they are left out of N and reported. Mutants no test reaches ("no tests") count as survivors: code that
nothing checks is exactly what this is meant to find. Timeouts count as killed (the mutant hung).

    python tests/mutation_run.py [--max-children 2] [--resume] [--only GLOB ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT = ROOT / "tests" / "mutation_equivalent.txt"
KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def _equivalents() -> list[tuple[str, str, str, str]]:
    out = []
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = [p.strip() for p in line.split(" :: ")]
            if len(parts) != 4 or not parts[1].startswith("- ") or not parts[2].startswith("+ "):
                sys.exit(f"{EQUIVALENT.name}: bad line (want `file :: - old :: + new :: reason`): {line}")
            out.append((parts[0], parts[1][2:].strip(), parts[2][2:].strip(), parts[3]))
    return out


def _changed_lines(diff: str) -> tuple[str, str]:
    minus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return (minus[0] if minus else ""), (plus[0] if plus else "")


def _function(mutant: str) -> str:
    name = mutant.rsplit(".", 1)[-1].split("__mutmut_")[0]
    if name.startswith("x\u01c1"):  # a method: xǁClassǁmethod
        return ".".join(name[2:].split("\u01c1"))
    return name[2:] if name.startswith("x_") else name


def _line_of(path: Path, function: str, text: str) -> int | None:
    """Line number of the mutated line: the first line equal to `text` inside `function`'s def."""
    lines = path.read_text().splitlines()
    fn = function.rsplit(".", 1)[-1]
    start = next((i for i, ln in enumerate(lines) if re.match(rf"\s*(async\s+)?def {re.escape(fn)}\(", ln)), 0)
    for i in range(start, len(lines)):
        if lines[i].strip() == text:
            return i + 1
    return None


def collect() -> dict:
    """Read mutmut's per-file results (mutants/*.meta) through its own API."""
    os.chdir(ROOT)
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    equivalents = _equivalents()
    res = {"killed": 0, "survived": 0, "equivalent": 0, "modules": [], "survivors": [], "equivalents": [],
           "by_module": {}}
    for path in sorted(walk_mutatable_files(), key=str):
        m = SourceFileMutationData(path=path)
        if not m.meta_path.exists():
            continue
        m.load()
        if not m.exit_code_by_key:
            continue
        mod = {"killed": 0, "survived": 0, "equivalent": 0}
        res["modules"].append(str(path))
        for key, code in sorted(m.exit_code_by_key.items()):
            status = status_by_exit_code[code]
            if status in KILLED:
                mod["killed"] += 1
                continue
            if status == "skipped":
                continue
            diff = get_diff_for_mutant(key, path=path)
            old, new = _changed_lines(diff)
            fn = _function(key)
            entry = {"file": str(path), "line": _line_of(path, fn, old), "function": fn, "mutant": key,
                     "status": status, "diff": diff}
            reason = next((r for f, o, n, r in equivalents if f == str(path) and o == old and n == new), None)
            if reason is not None:
                mod["equivalent"] += 1
                res["equivalents"].append(dict(entry, reason=reason))
            else:
                mod["survived"] += 1
                res["survivors"].append(entry)
        tested = mod["killed"] + mod["survived"]
        mod["score"] = round(mod["killed"] / tested, 4) if tested else None
        res["by_module"][str(path)] = mod
        for k in ("killed", "survived", "equivalent"):
            res[k] += mod[k]
    res["total"] = res["killed"] + res["survived"]
    res["score"] = round(res["killed"] / res["total"], 4) if res["total"] else 0.0
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-children", type=int, default=2, help="parallel mutant runs (default 2)")
    ap.add_argument("--resume", action="store_true", help="keep mutants/ from an earlier run (only unfinished ones run)")
    ap.add_argument("--report-only", action="store_true", help="do not run mutmut; report the last run's results")
    ap.add_argument("--output", default=str(ROOT / "mutation.json"))
    args = ap.parse_args()
    os.chdir(ROOT)
    if not args.report_only:
        if not args.resume and (ROOT / "mutants").exists():
            shutil.rmtree(ROOT / "mutants")  # the code moved since: start clean
        cfg = _config()
        print(f"mutmut over {len(cfg['only_mutate'])} modules with {len(cfg['pytest_add_cli_args_test_selection'])} "
              f"fast test files, {args.max_children} at a time (log: mutation.log) ...", flush=True)
        env = dict(os.environ, PERFBENCH_MUTATION="1")  # tests/test_properties.py: fewer Hypothesis examples
        t0 = time.time()
        with open(ROOT / "mutation.log", "w") as log:
            r = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        print(f"mutmut finished in {time.time() - t0:.0f} s (exit {r.returncode})", flush=True)
        if not (ROOT / "mutants").exists():
            print((ROOT / "mutation.log").read_text()[-3000:], file=sys.stderr)
            return 2
    res = collect()
    Path(args.output).write_text(json.dumps(res, indent=1))
    for mod, s in res["by_module"].items():
        print(f"  {mod:34s} killed {s['killed']:4d}  survived {s['survived']:4d}  equivalent {s['equivalent']:3d}"
              f"  score {s['score'] if s['score'] is not None else '-'}")
    print(f"equivalent (reviewed, left out): {res['equivalent']}; survivors listed in {Path(args.output).name}")
    print(f"mutation score: {res['score']:.3f} (killed {res['killed']} of {res['total']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
