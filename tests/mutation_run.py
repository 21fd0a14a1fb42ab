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

    python tests/mutation_run.py [--max-children 2] [--resume] [--budget SECONDS] [--report-only] [--rerun-survivors]
                                [--only perfbench.run.config]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the metric and decision functions mutated (mutmut globs over mutant names: module.x_function__mutmut_N).
#: mutmut mutates whole files (pyproject.toml [tool.mutmut] only_mutate); these are the functions whose
#: mutants are run and scored: the conclusions users act on, within a budget of ~1500 mutants (2 slow cores).
#: Registry glue, parsing helpers and rendering stay out.
FUNCTIONS = [
    "analyzers.analyses.step_metrics.x__workload_part__mutmut_*",  # run record: throughput, step time
    "analyzers.analyses.step_metrics.x_samples__mutmut_*",
    "analyzers.analyses.capture_cost.x_analysis__mutmut_*",  # what the profile cost the run
    "perfbench.views.results.x_baselines__mutmut_*",  # scaling efficiency
    "perfbench.views.results.x_summarize__mutmut_*",
    "perfbench.views.results.x_breakdown_fractions__mutmut_*",
    "perfbench.regress.check.x_decide_metric__mutmut_*",  # the CI gate's decision
    "perfbench.regress.check.x_between_run_margin__mutmut_*",  # the gate's between-run margin
    "perfbench.regress.check.x_parse_threshold__mutmut_*",
    "perfbench.regress.check.x_match_groups__mutmut_*",
    "perfbench.regress.check.x_groups_of__mutmut_*",
    "perfbench.regress.check.x_group_key__mutmut_*",
    "perfbench.regress.verdict.x_fold__mutmut_*",  # one verdict of many, and its exit code
    "perfbench.regress.verdict.x_exit_code__mutmut_*",
    "perfbench.regress.verdict.x_decide__mutmut_*",
    "perfbench.regress.compare.x_metric_delta__mutmut_*",  # compare's statistics
    "analyzers.stats.x_welch_ci__mutmut_*",
    "analyzers.stats.x_mann_whitney_p__mutmut_*",
    "perfbench.regress.compare.x_settings_diff__mutmut_*",
    "analyzers.metric.xǁMetricǁworse__mutmut_*",  # metric directions
    "analyzers.catalogue.x_metric__mutmut_*",
    "analyzers.stats.x_union_length__mutmut_*",  # breakdown and its reconciliation
    "analyzers.analyses.breakdown.x_reconcile__mutmut_*",
    "analyzers.analyses.collectives.x_busbw_factor__mutmut_*",  # bandwidth
    "analyzers.analyses.collectives.x_comm_op_stats__mutmut_*",
    "analyzers.analyses.slow_ranks.x__outlier_test__mutmut_*",  # slow ranks
    "analyzers.analyses.slow_ranks.x_sign_test_p__mutmut_*",
    "analyzers.analyses.slow_ranks.x__judge__mutmut_*",
    "analyzers.analyses.pipeline.x_ideal_bubble_fraction__mutmut_*",  # pipeline bubble
    "analyzers.analyses.pipeline.x_mean_bubble_fraction__mutmut_*",
    "analyzers.analyses.experts.x_expert_load__mutmut_*",  # expert load
    "analyzers.analyses.experts.x_mean_expert_cv__mutmut_*",
    "perfbench.run.config_models.x_run_rules__mutmut_*",  # config validation: rules across keys
    "perfbench.run.config_models.x_range_rules__mutmut_*",
    "perfbench.run.config_models.x_range_ends__mutmut_*",
    "perfbench.run.config_models.x_launch_rules__mutmut_*",
    "perfbench.run.config_models.x__data_folder__mutmut_*",
    "perfbench.run.config_errors.x_config_error__mutmut_*",  # the one-line error naming key and value
    "perfbench.run.config.x__check_value__mutmut_*",  # world size and swept values
    "perfbench.run.config.x__check_run__mutmut_*",
    "perfbench.run.config.x_parse_config__mutmut_*",
    "analyzers.analyses.advice.engine.x_account__mutmut_*",  # advice: each stretch of time explained once
    "analyzers.analyses.advice.engine.x_order__mutmut_*",  # ... ranked by gain, symptoms after their cause
    "analyzers.analyses.advice.engine.x_severity__mutmut_*",
    "analyzers.analyses.advice.engine.x_link__mutmut_*",
    "analyzers.analyses.advice.engine.x__best__mutmut_*",
    "analyzers.analyses.advice.engine.x__cause__mutmut_*",
    "analyzers.analyses.advice.engine.x__under_largest__mutmut_*",
    "analyzers.analyses.advice.engine.x_fold_order__mutmut_*",
    "analyzers.analyses.advice.small_packets.x_fusion_gain__mutmut_*",
    "analyzers.analyses.advice.budget.x_time_budget__mutmut_*",  # ... the time each pool has to give
    "analyzers.analyses.advice.budget.x__within_stage_spread__mutmut_*",
    "analyzers.analyses.advice.common.x_load_excess_ms__mutmut_*",  # ... the collectives' wait for a core
    "analyzers.analyses.advice.common.x_covered_excess_ms__mutmut_*",
    "analyzers.analyses.advice.common.x_fastest__mutmut_*",
    "analyzers.analyses.advice.common.x_budget_part__mutmut_*",
    "analyzers.analyses.advice.common.x_excess_ms_per_step__mutmut_*",
    "analyzers.analyses.advice.common.x_spans_stages__mutmut_*",
    "analyzers.analyses.advice.common.x_breakdown_share__mutmut_*",
    "analyzers.analyses.advice.common.x_exposure_split__mutmut_*",
    "analyzers.analyses.advice.common.x_transfer_ms__mutmut_*",
    "analyzers.analyses.advice.common.x_trusted__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x_compression_try__mutmut_*",  # ... the knobs' predictions
    "analyzers.analyses.advice.exposed_communication.x__straggler_explains_it__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x__balanced_split_step__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x_bottleneck_stage__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x__computing__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x__split_scale__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x__bubble_factor__mutmut_*",
    "analyzers.analyses.advice.budget.x__rank_step__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x__micro_batch_try__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x__micro_batch_saving__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x_host_ms__mutmut_*",
    "analyzers.analyses.advice.free_time.x_idle_outside__mutmut_*",
    # ... and every rule's finding: its thresholds, ranks, gain and basis
    "analyzers.analyses.advice.engine.x__finish__mutmut_*",
    "analyzers.analyses.advice.common.x_load_excess__mutmut_*",
    "analyzers.analyses.advice.common.x_with_load_excess__mutmut_*",
    "analyzers.analyses.advice.common.x_stage_ranks__mutmut_*",
    "analyzers.analyses.advice.common.x_n_steps__mutmut_*",
    "analyzers.analyses.advice.common.x_step_ms__mutmut_*",
    "analyzers.analyses.advice.aicpu_ops.x_find__mutmut_*",
    "analyzers.analyses.advice.aicpu_ops.x__share_text__mutmut_*",
    "analyzers.analyses.advice.bandwidth_reference.x__per_rank__mutmut_*",
    "analyzers.analyses.advice.bandwidth_reference.x_find__mutmut_*",
    "analyzers.analyses.advice.dropped_tokens.x_find__mutmut_*",
    "analyzers.analyses.advice.dynamic_shape.x_find__mutmut_*",
    "analyzers.analyses.advice.expert_imbalance.x_find__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x__ranks__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x__waiting_on_bottleneck__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x__pipeline__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x__collective__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x__rows__mutmut_*",
    "analyzers.analyses.advice.exposed_communication.x_find__mutmut_*",
    "analyzers.analyses.advice.free_time.x_pipeline_window_us__mutmut_*",
    "analyzers.analyses.advice.free_time.x__scope__mutmut_*",
    "analyzers.analyses.advice.free_time.x__row__mutmut_*",
    "analyzers.analyses.advice.free_time.x__outside__mutmut_*",
    "analyzers.analyses.advice.free_time.x__windowed__mutmut_*",
    "analyzers.analyses.advice.free_time.x_find__mutmut_*",
    "analyzers.analyses.advice.memory_fragmentation.x_find__mutmut_*",
    "analyzers.analyses.advice.memory_near_capacity.x_knob_options__mutmut_*",
    "analyzers.analyses.advice.memory_near_capacity.x__near_capacity__mutmut_*",
    "analyzers.analyses.advice.memory_near_capacity.x_find__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x__per_stage__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x__pool__mutmut_*",
    "analyzers.analyses.advice.pipeline_bubble.x_find__mutmut_*",
    "analyzers.analyses.advice.rank_imbalance.x__ms__mutmut_*",
    "analyzers.analyses.advice.rank_imbalance.x__row__mutmut_*",
    "analyzers.analyses.advice.rank_imbalance.x_find__mutmut_*",
    "analyzers.analyses.advice.slow_link.x_find__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x_group_members__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x_stragglers__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x_cpu_excess_ms__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x__profiler_only__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x__row__mutmut_*",
    "analyzers.analyses.advice.slow_rank.x_find__mutmut_*",
    "analyzers.analyses.advice.small_packets.x_serial_share__mutmut_*",
    "analyzers.analyses.advice.small_packets.x_unprofiled_scale__mutmut_*",
    "analyzers.analyses.advice.small_packets.x_find__mutmut_*",
    "analyzers.analyses.advice.stage_imbalance.x_find__mutmut_*",
    "analyzers.analyses.advice.step_time_spread.x_find__mutmut_*",
    "analyzers.analyses.advice.tensor_parallel_comm.x__step_ms__mutmut_*",
    "analyzers.analyses.advice.tensor_parallel_comm.x__share__mutmut_*",
    "analyzers.analyses.advice.tensor_parallel_comm.x_find__mutmut_*",
    "analyzers.analyses.advice.wait_ratio.x__per_rank__mutmut_*",
    "analyzers.analyses.advice.wait_ratio.x_find__mutmut_*",
]
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


def collect(functions: list[str] = FUNCTIONS) -> dict:
    """Read mutmut's per-file results (mutants/*.meta) through its own API."""
    os.chdir(ROOT)
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    equivalents = _equivalents()
    res = {
        "functions": functions,
        "killed": 0,
        "survived": 0,
        "equivalent": 0,
        "not_checked": 0,
        "not_checked_mutants": [],
        "modules": [],
        "survivors": [],
        "equivalents": [],
        "by_module": {},
    }
    for path in sorted(walk_mutatable_files(), key=str):
        m = SourceFileMutationData(path=path)
        if not m.meta_path.exists():
            continue
        m.load()
        if not any(fnmatch.fnmatch(k, g) for k in m.exit_code_by_key for g in functions):
            continue
        mod = {"killed": 0, "survived": 0, "equivalent": 0, "not_checked": 0}
        res["modules"].append(str(path))
        for key, code in sorted(m.exit_code_by_key.items()):
            if not any(fnmatch.fnmatch(key, g) for g in functions):
                continue
            status = status_by_exit_code[code]
            if status == "not checked":  # the run was stopped by --budget before reaching it
                mod["not_checked"] += 1
                res["not_checked_mutants"].append(key)
                continue
            if status in KILLED:
                mod["killed"] += 1
                continue
            if status == "skipped":
                continue
            diff = get_diff_for_mutant(key, path=path)
            old, new = _changed_lines(diff)
            fn = _function(key)
            entry = {
                "file": str(path),
                "line": _line_of(path, fn, old),
                "function": fn,
                "mutant": key,
                "status": status,
                "diff": diff,
            }
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
        for k in ("killed", "survived", "equivalent", "not_checked"):
            res[k] += mod[k]
    res["total"] = res["killed"] + res["survived"]
    res["score"] = round(res["killed"] / res["total"], 4) if res["total"] else 0.0
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-children", type=int, default=2, help="parallel mutant runs (default 2)")
    ap.add_argument(
        "--resume", action="store_true", help="keep mutants/ from an earlier run (only unfinished ones run)"
    )
    ap.add_argument("--report-only", action="store_true", help="do not run mutmut; report the last run's results")
    ap.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="after adding tests: copy tests/ into mutants/ and run again only the last run's survivors "
        "(and the mutants it did not reach)",
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="PREFIX",
        help="run and score only the FUNCTIONS that start with PREFIX (repeatable), e.g. "
        "--only perfbench.run.config (a quick check of one module; the score is for them only)",
    )
    ap.add_argument("--output", default=str(ROOT / "mutation.json"))
    ap.add_argument(
        "--budget",
        type=float,
        default=0,
        metavar="S",
        help="stop mutmut after S seconds and report what it checked (unchecked mutants are counted apart)",
    )
    args = ap.parse_args()
    os.chdir(ROOT)
    names = [f for f in FUNCTIONS if not args.only or any(f.startswith(p) for p in args.only)]
    if not names:
        sys.exit(f"--only {' '.join(args.only)}: no function in FUNCTIONS starts with that")
    scored = names
    if args.rerun_survivors:
        last = json.loads(Path(args.output).read_text())
        names = [
            n
            for n in [s["mutant"] for s in last["survivors"]] + last.get("not_checked_mutants", [])
            if not args.only or any(n.startswith(p) for p in args.only)
        ]
        for f in (ROOT / "tests").rglob("*.py"):  # mutmut copies the tree once; bring the new tests in
            dest = ROOT / "mutants" / f.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
        args.resume = True
    if not args.report_only and names:
        if not args.resume and (ROOT / "mutants").exists():
            shutil.rmtree(ROOT / "mutants")  # the code moved since: start clean
        cfg = _config()
        print(
            f"mutmut over {len(cfg['only_mutate'])} modules with {len(cfg['pytest_add_cli_args_test_selection'])} "
            f"fast test files, {args.max_children} at a time (log: mutation.log) ...",
            flush=True,
        )
        env = dict(os.environ, PERFBENCH_MUTATION="1")  # tests/unit/test_properties.py: fewer Hypothesis examples
        t0 = time.time()
        with open(ROOT / "mutation.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *names],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=args.budget or None)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)  # mutmut keeps the results it has
                try:
                    rc = proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    rc = proc.wait()
                print(f"budget of {args.budget:.0f} s reached: stopped mutmut", flush=True)
        print(f"mutmut finished in {time.time() - t0:.0f} s (exit {rc})", flush=True)
        if not (ROOT / "mutants").exists():
            print((ROOT / "mutation.log").read_text()[-3000:], file=sys.stderr)
            return 2
    res = collect(scored)
    Path(args.output).write_text(json.dumps(res, indent=1))
    for mod, s in res["by_module"].items():
        print(
            f"  {mod:34s} killed {s['killed']:4d}  survived {s['survived']:4d}  equivalent {s['equivalent']:3d}"
            f"  score {s['score'] if s['score'] is not None else '-'}"
        )
    print(
        f"equivalent (reviewed, left out): {res['equivalent']}; not checked (budget): {res['not_checked']}; "
        f"survivors listed in {Path(args.output).name}"
    )
    print(f"mutation score: {res['score']:.3f} (killed {res['killed']} of {res['total']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
