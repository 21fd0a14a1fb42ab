"""Each rule's measured accuracy from the stored `advise --try` trials (perfbench/run/advise_accuracy.py), on
hand-made trial records: which trials count, the ratio range by hand, and `perfbench advise` (text and --json)
showing it next to the gain."""

from __future__ import annotations

import json

import pytest

from perfbench.run.advise_accuracy import accuracy_text, rule_accuracy, with_accuracy
from perfbench.store import Store
from tests.support import perfbench_in_process
from tests.unit.test_advise_try import advice, row, stored  # noqa: F401 (stored: a pytest fixture)


def trial(rule, predicted, measured, status="ok"):
    return {
        "rule": rule,
        "finding": f"{rule}:all",
        "status": status,
        "predicted_gain_ms": predicted,
        "measured_gain_ms": measured,
    }


TRIALS = [
    trial("small_packets", 40.0, 32.0),  # 0.8
    trial("small_packets", 20.0, 22.0),  # 1.1
    trial("small_packets", 10.0, 9.0),  # 0.9
    trial("small_packets", 10.0, None),  # no measurement: left out
    trial("small_packets", 10.0, 50.0, status="failed"),  # failed: left out
    trial("stage_imbalance", 300.0, 510.0),  # 1.7
    trial("exposed_communication", 0.0, -9.7),  # no positive prediction: no ratio
    trial("exposed_communication", None, 3.0),
]


def test_rule_accuracy_by_hand():
    acc = rule_accuracy(TRIALS)
    assert set(acc) == {"small_packets", "stage_imbalance"}
    sp = acc["small_packets"]
    assert sp["trials"] == 3
    assert sp["low"] == pytest.approx(0.8) and sp["high"] == pytest.approx(1.1) and sp["median"] == pytest.approx(0.9)
    assert acc["stage_imbalance"] == pytest.approx({"trials": 1, "low": 1.7, "high": 1.7, "median": 1.7})


def test_rule_accuracy_reads_the_stored_table_and_nothing(tmp_path):
    store = Store(tmp_path / "res")
    assert rule_accuracy(store.read_advice_trials()) == {}  # no trials file yet
    store.append_advice_trials(TRIALS)
    assert rule_accuracy(store.read_advice_trials())["small_packets"]["trials"] == 3
    assert rule_accuracy([trial("x", float("nan"), 1.0), trial("x", 1.0, float("nan"))]) == {}


def test_accuracy_text():
    assert accuracy_text(rule_accuracy(TRIALS)["small_packets"]) == "this rule's gains measured 0.8-1.1x on 3 trials"
    assert accuracy_text(rule_accuracy(TRIALS)["stage_imbalance"]) == "this rule's gains measured 1.7x on 1 trial"
    assert accuracy_text(None) is None


def test_with_accuracy_marks_each_row_of_its_rule():
    rows = [{"id": "small_packets:all", "rule": "small_packets"}, {"id": "free_time:all", "rule": "free_time"}]
    out = with_accuracy(rows, TRIALS)
    assert out[0]["accuracy"]["trials"] == 3 and out[0]["accuracy"]["text"].endswith("on 3 trials")
    assert out[1]["accuracy"] is None


def test_advise_prints_and_json_carries_the_accuracy(stored):  # noqa: F811
    store, rec = stored
    store.write_table(
        rec["run_id"],
        "advice",
        advice(row("small_packets:all", 40.0, {"parallel.comm_fusion": "all"}), row("free_time:all", 10.0)),
    )
    store.append_advice_trials(TRIALS)
    r = perfbench_in_process("advise", rec["run_id"], "--results", store.root)
    assert "this rule's gains measured 0.8-1.1x on 3 trials" in r.stdout
    j = json.loads(perfbench_in_process("advise", rec["run_id"], "--results", store.root, "--json").stdout)
    acc = {a["id"]: a["accuracy"] for a in j["advice"]}
    assert acc["free_time:all"] is None
    assert acc["small_packets:all"]["trials"] == 3 and acc["small_packets:all"]["low"] == pytest.approx(0.8)
