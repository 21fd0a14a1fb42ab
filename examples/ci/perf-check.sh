#!/usr/bin/env bash
# CI performance gate: run a small real sweep, then check it against a saved baseline.
#
#   examples/ci/perf-check.sh [RESULTS_DIR] [BASELINE_NAME]
#
# First run (or PERFBENCH_SAVE_BASELINE=1, e.g. on the main branch): the sweep is saved as the baseline.
# Later runs: `perfbench check` compares the new sweep with it and exits
#   0 no regression · 1 regression · 2 could not decide (missing runs, failed runs, bad input).
# Outputs: Markdown summary (stdout, and $GITHUB_STEP_SUMMARY when set), JUnit XML (perf-check.xml), JSON.
# Keep RESULTS_DIR between CI runs (cache/artifact) so the baseline survives; a baseline file is
# self-contained (it keeps the per-step samples), so only RESULTS_DIR/baselines/ and RESULTS_DIR/history/
# (one small JSON file per checked sweep: the series `check --history` judges against) need to be kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-perfbench-results}"
name="${2:-ci-main}"
threshold="${PERFBENCH_THRESHOLD:-5%}"
perfbench="${PERFBENCH:-perfbench}"

$perfbench sweep "$here/small-sweep.yaml" --results "$results"
# the newest sweep of this config (sweep ids are <name>-<UTC timestamp>)
sweep_id="$(basename "$(ls -1 "$results"/sweeps/ci-*.json | sort | tail -n 1)" .json)"
echo "sweep: $sweep_id"

if [[ "${PERFBENCH_SAVE_BASELINE:-0}" == 1 ]] || [[ ! -f "$results/baselines/$name.json" ]]; then
  $perfbench baseline save "$sweep_id" --name "$name" --results "$results"
  echo "saved baseline $name from $sweep_id (nothing to compare yet)"
  exit 0
fi

set +e
# --history: also record this sweep (with its commit) in the history and judge it against the series
$perfbench check --baseline "$name" --current "$sweep_id" --threshold "$threshold" --history \
  --results "$results" --junit perf-check.xml
code=$?
$perfbench check --baseline "$name" --current "$sweep_id" --threshold "$threshold" --history \
  --results "$results" --json --summary /dev/null > perf-check.json
exit $code
