"""Hand-written data-parallel communication for the CPU backend: gradient bucketing and compression.

`bucketing.plan_buckets` groups gradients into buckets of a given MB; `bucketing.BucketAllReduce` all-reduces
them inside the compiled step.  `compression` adds fp16 casting, PowerSGD (low-rank, error feedback) and top-k (error
feedback).
"""
