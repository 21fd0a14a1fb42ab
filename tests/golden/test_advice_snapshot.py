"""The ranked advice on every shared Ascend and Kineto fixture set the advice tests read is the one recorded in
tests/golden/advice_top_findings.json (root ids in order, gains to 0.01 ms, knobs, the ids folded under each):
recorded from the advice engine before it was split into one module per rule, so the split changed no finding.
A change to the advice that is meant regenerates the file (tests/support/advice_snapshot.py says how)."""

from __future__ import annotations

import json

import pytest

from tests.support.advice_snapshot import CASES, EXPECTED, snapshot

WANT = json.loads(EXPECTED.read_text())


def test_every_case_is_recorded():
    assert sorted(WANT) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_ranked_advice_is_unchanged(tmp_path, name):
    assert snapshot(name, tmp_path) == WANT[name], (
        f"the ranked advice on {name} changed; if that is meant, regenerate with "
        "`python -m tests.support.advice_snapshot`"
    )
