"""Reference training workloads: MindSpore ones launched by msrun (see docs/architecture.md for the contract), and
the PyTorch one (`torch_ddp/`) swept as a script under torchrun."""
