"""perfbench: profiling and performance-tuning workbench for distributed MindSpore training."""

__version__ = "0.1.0"
