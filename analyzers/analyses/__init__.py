"""Analyses: pure functions over the schema, each a registry entry (analyzers/registry.py)."""
