"""Comparing runs and catching regressions: compare, the CI gate (check, the interleaved A/B job), history with
change points, baselines."""
