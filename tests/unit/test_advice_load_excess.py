"""The collectives' load excess (analyzers/analyses/advice/common.py `load_excess_ms`, `covered_excess_ms`): clipped
at 0, and None (not 0) when the tables cannot tell it; `exposed_communication` then claims nothing from it and says
so. Hand-computed values."""

from __future__ import annotations

import pandas as pd
import pytest

from analyzers.analyses import advice as A
from analyzers.analyses.advice import common

CPU_OPS = pd.DataFrame({"op_name": ["MatMul"], "core_type": ["CPU"]})


def _co(times_ms, sizes=(1024.0, 1024.0)) -> pd.DataFrame:
    """One all-reduce of a 2-rank group per entry, on rank 0, each in its own step (0, 1, ...), no start times."""
    return pd.DataFrame(
        {
            "rank": [0] * len(times_ms),
            "step": list(range(len(times_ms))),
            "op_type": ["AllReduce"] * len(times_ms),
            "op_name": [f"ar{i}" for i in range(len(times_ms))],
            "group_size": [2] * len(times_ms),
            "size_bytes": list(sizes),
            "transit_ms": list(times_ms),
        }
    )


def test_covered_excess_is_clipped_at_zero_and_at_the_interval():
    # one collective [0, 2 ms]: an excess below 0 (faster than its floor) counts 0, not -1 ms; an excess of 5 ms on a
    # 2 ms interval counts the 2 ms the interval covers: cut short by 5 ms it covers nothing
    assert common.covered_excess_ms([0.0], [2.0], [-1.0]) == 0.0
    assert common.covered_excess_ms([0.0], [2.0], [5.0]) == pytest.approx(2.0)
    # two at once ([0, 4] and [1, 5] ms, each 3 ms over its floor): cut short they cover [0, 1] and [1, 2]; the union
    # 5 ms less 2 ms = 3 ms (their common wait counted once); with one at -3 ms instead: union 5 less [0, 4] cut to
    # [0, 1] and [1, 5] whole = 5 - 5 = 0
    assert common.covered_excess_ms([0.0, 1000.0], [4.0, 4.0], [3.0, 3.0]) == pytest.approx(3.0)
    assert common.covered_excess_ms([0.0, 1000.0], [4.0, 4.0], [3.0, -3.0]) == 0.0


def test_load_excess_is_zero_where_every_collective_ran_at_its_floor():
    # two steps, one all-reduce each of the same size and time (2 ms): the floor is 2 ms, each excess 0 -> median 0
    assert common.load_excess_ms({"comm_ops": _co([2.0, 2.0]), "ops_for_checks": CPU_OPS}) == 0.0
    # the second at 5 ms: excess 0 and 3 ms per (rank, step) -> median 1.5 ms
    assert common.load_excess_ms({"comm_ops": _co([2.0, 5.0]), "ops_for_checks": CPU_OPS}) == pytest.approx(1.5)


def test_load_excess_unknown_is_none():
    co = _co([2.0, 5.0])
    assert common.load_excess_ms({"comm_ops": co}) is None  # where the operators ran: unknown
    assert common.load_excess_ms({"ops_for_checks": CPU_OPS}) is None  # no collectives table
    no_size = co.assign(size_bytes=float("nan"))
    assert common.load_excess_ms({"comm_ops": no_size, "ops_for_checks": CPU_OPS}) is None  # no collective sized
    # on an accelerator it is 0 by definition (the spread is the communication findings'), known
    npu = pd.DataFrame({"op_name": ["MatMul"], "core_type": ["AI_CORE"]})
    assert common.load_excess_ms({"comm_ops": co, "ops_for_checks": npu}) == 0.0
    # handed in as None it stays None (not recomputed, not 0)
    assert common.load_excess({A.LOAD_EXCESS_KEY: None, "comm_ops": co, "ops_for_checks": CPU_OPS}) is None


def test_exposed_communication_claims_nothing_from_an_unknown_excess_and_says_so():
    # 2 ranks expose 10 ms of a 40 ms step (step_breakdown), the collectives carry no sizes: the excess is unknown,
    # so nothing is taken off: gain 10 ms, its basis an upper bound; sized and 1.5 ms over the floor, 10 - 1.5 = 8.5
    sb = pd.DataFrame(
        {
            "rank": [0, 1],
            "step": [0, 0],
            "step_us": [40_000.0] * 2,
            "computing_us": [20_000.0] * 2,
            "communication_not_overlapped_us": [10_000.0] * 2,
            "free_us": [0.0] * 2,
        }
    )

    def row(co):
        out = A.advise({"comm_ops": co, "ops_for_checks": CPU_OPS, "step_breakdown": sb}, {"step_time_s": 0.04})
        return out.set_index("rule").loc["exposed_communication"]

    unknown = row(_co([2.0, 5.0]).assign(size_bytes=float("nan")))
    assert unknown["gain_ms"] == pytest.approx(10.0) and "is unknown" in unknown["basis"]
    sized = row(_co([2.0, 5.0]))
    assert sized["gain_ms"] == pytest.approx(8.5) and "less 1.5 ms" in sized["basis"]
