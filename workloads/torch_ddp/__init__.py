"""The PyTorch reference workload: ResNet-50 under DDP (`train.py`), run through `workload: script` + torchrun."""
