"""Reference MindSpore training workloads launched by msrun (see docs/architecture.md for the contract)."""
