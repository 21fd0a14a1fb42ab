"""What holds a sweep rank's peak from the model's sizes (analyzers/analyses/memory.attribution): with ZeRO the
optimizer state is the rank's own shard's. Expected bytes computed by hand."""

from __future__ import annotations

import pytest

from analyzers.analyses.memory import attribution

MB = 1_000_000
ROW = {
    "params": 10 * MB,  # 10 M parameters
    "peak_bytes": 1000 * MB,
    "peak_source": "workload: process resident high-water mark",
    "baseline_bytes": 400 * MB,
    "peak_allocated_bytes": None,
    "peak_reserved_bytes": None,
}


def _parts(shard=None, optimizer="adamw"):
    return {a["part"]: a for a in attribution(dict(ROW), None, None, optimizer, shard)}


def test_replicated_adamw_holds_two_states_per_parameter():
    p = _parts()
    assert p["parameters"]["bytes"] == 40 * MB and p["gradients"]["bytes"] == 40 * MB  # 10 M x 4 B
    assert p["optimizer_state"]["bytes"] == 80 * MB  # 10 M x 4 B x 2
    # the rest of the 1000 MB peak: 1000 - 400 - 40 - 40 - 80
    assert p["activations_workspace"]["bytes"] == 440 * MB
    assert p["optimizer_state"]["share"] == pytest.approx(0.08)


def test_a_zero_shard_holds_the_state_of_its_own_parameters_only():
    p = _parts(shard=4 * MB)  # this rank owns 4 M of the 10 M parameters
    assert p["optimizer_state"]["bytes"] == 32 * MB  # 4 M x 4 B x 2
    assert "4000000 of 10000000 parameters" in p["optimizer_state"]["source"]
    assert p["parameters"]["bytes"] == 40 * MB and p["gradients"]["bytes"] == 40 * MB  # whole on every rank
    assert p["activations_workspace"]["bytes"] == 488 * MB  # 1000 - 400 - 40 - 40 - 32
    assert _parts(shard=4 * MB, optimizer="momentum")["optimizer_state"]["bytes"] == 16 * MB  # one state
