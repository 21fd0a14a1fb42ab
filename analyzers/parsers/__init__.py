"""Profiler formats -> the schema: MindSpore CPU, Ascend text/db, msprof, legacy MindSpore, the loader that finds
them, the streaming Chrome-trace reader."""
