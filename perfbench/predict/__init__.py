"""`perfbench predict`: what a job will do with settings and cluster sizes that were never run.

A small analytical model calibrated on stored runs (it reads the store only; no MindSpore):

    observe.py      stored runs -> Observation (step time, scaled breakdown, collectives, gradient tensors)
    comm.py         the collectives a setting issues (buckets, compression) and their cost
                    latency x steps + factor x bytes / bandwidth (ring all-reduce 2(n-1)/n, ...)
    hardware.py     hardware profiles (hardware/*.yaml): the measured machine fitted from its runs, Ascend 910
                    from published specifications
    model.py        fit(observations) -> Calibration; predict(calibration, target, hardware) -> Prediction
    replay.py       rebuild a profiled Ascend rank's step from its own kernels and collectives

docs/predict.md explains the model, its terms and its assumptions.
"""
