"""Running training: the sweep config and its validation, launching ranks with msrun (or Slurm), reaping, ingesting
a finished run, its record, `advise --try`'s experiments, MindInsight."""
