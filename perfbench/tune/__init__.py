"""`perfbench tune`: the search (Optuna), its `search:` section, confirmation re-runs, the answer, the memory
constraint."""
