#!/usr/bin/env bash
# CI performance gate: run a small real sweep, then check it against a saved baseline.
#
#   examples/ci/perf-check.sh [RESULTS_DIR] [BASELINE_NAME]
#
# First run (or PERFBENCH_SAVE_BASELINE=1, e.g. on the main branch): the sweep is saved as the baseline.
# Later runs: `perfbench check` compares the new sweep with it and exits
#   0 no regression · 1 regression · 2 could not decide (missing runs, failed runs, bad input).
# Outputs: Markdown summary (stdout, and $GITHUB_STEP_SUMMARY when set), JUnit XML (perf-check.xml), JSON
# (perf-check.json). PERFBENCH_HISTORY_METRIC picks the metric judged against the history (default step_cpu_s;
# on a dedicated runner, throughput is worth gating on too: run the check once more with it).
#
# Pull requests (PERFBENCH_AB_BASE_REF set, e.g. origin/main): the interleaved A/B gate instead. The base ref is
# checked out beside this checkout (git worktree), and `perfbench check --ab` runs examples/ci/ab-run.yaml from
# the base checkout (A) and from this one (B) alternately, PERFBENCH_AB_PAIRS pairs (default 7), and decides on
# the per-pair ratios: load that changes during the job cancels out (docs/check.md, "check --ab"). Needs no
# baseline or history. The history gate below stays for trends on main.
# Keep RESULTS_DIR between CI runs (cache/artifact) so the baseline survives; a baseline file is
# self-contained (it keeps the per-step samples), so only RESULTS_DIR/baselines/ and RESULTS_DIR/history/
# (one small JSON file per checked sweep: the series `check --history` judges against) need to be kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-perfbench-results}"
name="${2:-ci-main}"
threshold="${PERFBENCH_THRESHOLD:-5%}"
perfbench="${PERFBENCH:-perfbench}"

# run one `perfbench check ...` (its arguments), print its Markdown summary (and add it to the job summary), exit
# with its code
check_and_report() {
  set +e
  rm -f perf-check.md
  $perfbench check "$@" --results "$results" --junit perf-check.xml --summary perf-check.md --json > perf-check.json
  local code=$?
  cat perf-check.md
  [[ -n "${GITHUB_STEP_SUMMARY:-}" ]] && cat perf-check.md >> "$GITHUB_STEP_SUMMARY"
  rm -f perf-check.md
  exit $code
}

if [[ -n "${PERFBENCH_AB_BASE_REF:-}" ]]; then
  base="$(mktemp -d)/base"
  git worktree add --detach "$base" "$PERFBENCH_AB_BASE_REF" >/dev/null
  trap 'git worktree remove --force "$base" >/dev/null 2>&1 || true' EXIT
  py="${PERFBENCH_PYTHON:-python}"
  mkdir -p "$results"
  abs_results="$(cd "$results" && pwd)"
  # `python -m perfbench` from a checkout's folder runs that checkout's perfbench and workloads
  check_and_report --ab --pairs "${PERFBENCH_AB_PAIRS:-7}" --threshold "$threshold" \
    --baseline-cmd "cd '$base' && $py -m perfbench sweep '$here/ab-run.yaml' --results '$abs_results'" \
    --candidate-cmd "cd '$here/../..' && $py -m perfbench sweep '$here/ab-run.yaml' --results '$abs_results'"
fi

$perfbench sweep "$here/small-sweep.yaml" --results "$results"
# the newest sweep of this config (sweep ids are <name>-<UTC timestamp>)
sweep_id="$(basename "$(ls -1 "$results"/sweeps/ci-*.json | sort | tail -n 1)" .json)"
echo "sweep: $sweep_id"

if [[ "${PERFBENCH_SAVE_BASELINE:-0}" == 1 ]] || [[ ! -f "$results/baselines/$name.json" ]]; then
  $perfbench baseline save "$sweep_id" --name "$name" --results "$results"
  echo "saved baseline $name from $sweep_id (nothing to compare yet)"
  exit 0
fi

# One call: the per-pair check against the baseline on the wall-clock metrics (thresholds raised to the repeat
# noise), and --history: record this sweep (with its commit) and judge CPU time per step against the history
# (each run valued by its 10% fastest steps). On a shared, loaded runner CPU time per step still moves with the
# load, so expect false alarms there (measured in docs/check.md); on a dedicated runner it is steady.
check_and_report --baseline "$name" --current "$sweep_id" --threshold "$threshold" --history \
  --history-metric "${PERFBENCH_HISTORY_METRIC:-step_cpu_s}"
