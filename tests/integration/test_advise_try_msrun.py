"""Injected causes and `perfbench advise RUN --try` with real msrun runs (tiny 2-rank ResNet-50, few steps).

- A straggler run (`inject.straggler_rank: 1`, `straggler_busy_ms`): rank 1's own step records show the CPU it
  burned; its top finding is the straggler (`slow_rank`).
- An input-delay run (`inject.input_delay_ms`, gradients fused): every step record shows the wait before the
  compiled step and the profiler's own breakdown shows it as idle time; its top finding is `free_time`.
- An unbalanced pipeline split (`parallel.pipeline_split: [2, 16]`: stem + one block on stage 0, the other 15
  blocks and the head on stage 1): its top finding is `stage_imbalance` of stage 1, with the balanced split to try.
- Unfused small all-reduces (`comm_fusion: 0`, one all-reduce per parameter): the top finding is `small_packets`.
- On all of them the root gains add up to no more than the step's exposed + idle + overlapped + imbalance time, and
  no more than the step (the budget computed here from the stored tables, not by the advice module).
- `advise STRAGGLER --try 2 --repeats 1` on hand-made advice rows (the contract's columns): a fix that crashes is
  stored failed with its reason and the next fix still runs; removing the straggler measures a gain.

The top finding is the first root of the stored ranked advice (analyzers/analyses/advice/).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from perfbench.store import Store
from tests.support import run_perfbench, write_yaml
from tests.unit.test_advise_try import CONTRACT

pytestmark = pytest.mark.msrun

BUSY_MS = 300.0  # well above the tiny model's step (~30 ms idle; several times that under load)
INPUT_MS = 300.0
TINY = {
    "workload": "resnet50",
    "model": {"image_size": 32, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]},
    "train": {"batch_size": 4, "steps": 5, "warmup_steps": 2},
    "profile": {"enabled": True, "steps": 2},
    "launch": {"timeout_s": 300, "stall_timeout_s": 120},
    "sweep": {"world_size": [2]},
}


def _sweep(base: Path, name: str, inject: dict, **more) -> tuple[Path, dict]:
    results = base / name
    cfg = write_yaml(base / f"{name}.yaml", dict(TINY, name=name, inject=inject, **more))
    run_perfbench("sweep", cfg, "--results", results, timeout=600)
    (rec,) = Store(results).list_runs()
    assert rec["status"] == "ok", rec.get("error")
    return results, rec


@pytest.fixture(scope="module")
def straggler(tmp_path_factory):
    return _sweep(
        tmp_path_factory.mktemp("advise_try"), "straggler", {"straggler_rank": 1, "straggler_busy_ms": BUSY_MS}
    )


@pytest.fixture(scope="module")
def input_delay(tmp_path_factory):
    # gradients fused: the unfused all-reduces' waits for a core grow with the machine's load and are a second,
    # real cause (small_packets) that could rightly outrank the fixed input wait on a busy machine
    return _sweep(
        tmp_path_factory.mktemp("advise_try"), "indelay", {"input_delay_ms": INPUT_MS}, parallel={"comm_fusion": "all"}
    )


#: the unbalanced split: resnet50 3-4-6-3 has 18 layers (stem, 16 blocks, head); the cost-balanced split of this
#: model is about [7, 11]. A heavier model than TINY so that stage 1's compute stands out of the host loop's
#: per-op idle time (PyNative, docs/advice.md)
SPLIT = [2, 16]
PIPE = dict(
    TINY,
    model={"image_size": 32, "num_classes": 10, "width": 8, "layers": [3, 4, 6, 3]},
    train={"batch_size": 8, "steps": 6, "warmup_steps": 3},
    parallel={"pipeline_stages": 2, "micro_batches": 4, "pipeline_split": SPLIT},
)


@pytest.fixture(scope="module")
def unbalanced(tmp_path_factory):
    base = tmp_path_factory.mktemp("advise_try")
    results = base / "unbalanced"
    run_perfbench(
        "sweep", write_yaml(base / "unbalanced.yaml", dict(PIPE, name="unbalanced")), "--results", results, timeout=600
    )
    (rec,) = Store(results).list_runs()
    assert rec["status"] == "ok", rec.get("error")
    return results, rec


@pytest.fixture(scope="module")
def unfused(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("advise_try"), "unfused", {})


def _steps(results, rec) -> pd.DataFrame:
    df = Store(results).read_table(rec["run_id"], "workload_steps")
    return df[df["step"] >= TINY["train"]["warmup_steps"]]


def _top_root(results, rec) -> pd.Series:
    adv = Store(results).read_table(rec["run_id"], "advice")
    assert adv is not None and len(adv), "no advice at all"
    assert "gain_ms" in adv.columns and "symptom_of" in adv.columns
    roots = adv[adv["symptom_of"].isna()]
    return roots.iloc[0]


def test_straggler_burns_cpu_on_its_rank_only(straggler):
    steps = _steps(*straggler)
    cpu = steps.groupby("rank")["cpu_s"].median() * 1000
    extra = cpu[1] - cpu[0]  # rank 1's step CPU time above rank 0's, per step
    assert 0.8 * BUSY_MS <= extra <= 1.3 * BUSY_MS + 30, dict(cpu)
    # the other rank waits for it: every step takes at least the burn on both ranks
    assert (steps["step_time_s"] * 1000 >= 0.95 * BUSY_MS).all()
    assert "input_wait_s" not in steps.columns or steps["input_wait_s"].isna().all()


def test_input_delay_waits_before_every_step(input_delay):
    results, rec = input_delay
    steps = _steps(results, rec)
    assert len(steps) == 2 * (TINY["train"]["steps"] - TINY["train"]["warmup_steps"])
    assert (steps["input_wait_s"] * 1000 >= INPUT_MS).all() and (steps["input_wait_s"] * 1000 < INPUT_MS + 200).all()
    assert (steps["step_time_s"] >= steps["input_wait_s"]).all()  # inside the timed step
    # the profiler sees no op during the wait: each profiled step's idle time holds it
    sb = Store(results).read_table(rec["run_id"], "step_breakdown")
    assert len(sb) == 2 * TINY["profile"]["steps"]
    assert (sb["free_us"] >= 0.9 * INPUT_MS * 1000).all(), sb[["rank", "step", "free_us", "step_us"]]


def test_straggler_is_the_top_finding(straggler):
    top = _top_root(*straggler)
    assert top["rule"] == "slow_rank" and 1 in list(
        json.loads(top["ranks"]) if isinstance(top["ranks"], str) else top["ranks"]
    )


def test_input_delay_is_the_top_finding(input_delay):
    assert _top_root(*input_delay)["rule"] == "free_time"


def test_unbalanced_split_is_the_top_finding(unbalanced):
    results, rec = unbalanced
    assert rec["config"]["parallel"]["pipeline_split"] == SPLIT
    st = Store(results).read_table(rec["run_id"], "stages").set_index("stage")
    assert st.loc[1, "computing_ms"] > 2 * st.loc[0, "computing_ms"], st  # the split did what it says
    top = _top_root(results, rec)
    assert top["id"] == "stage_imbalance:1", top
    assert json.loads(top["try"]) == {"parallel.pipeline_split": None}
    # its gain is the formula's: the slowest stage's compute above the stages' mean (docs/advice.md)
    assert top["gain_ms"] == pytest.approx(st.loc[1, "computing_ms"] - st["computing_ms"].mean(), rel=1e-6)


def test_unfused_small_allreduces_is_the_top_finding(unfused):
    results, rec = unfused
    assert rec["config"]["parallel"]["comm_fusion"] == 0
    top = _top_root(results, rec)
    assert top["rule"] == "small_packets" and json.loads(top["try"]) == {"parallel.comm_fusion": "all"}, top


def _budget(store, rid) -> float:
    """exposed + idle + the communication overlapped with compute (per rank the median over profiled steps, the
    largest rank; on the CPU, where these runs are, fusion may draw on the overlapped time too: the collectives'
    threads share the cores with the compute) + imbalance (the stages' compute spread + the largest computing spread
    of a group), ms per step."""
    sb = store.read_table(rid, "step_breakdown")
    total = 0.0
    for col in ("communication_not_overlapped_us", "free_us", "overlapped_us"):
        total += float(sb.groupby("rank")[col].median().max()) / 1000.0
    st = store.read_table(rid, "stages")
    if st is not None and len(st) >= 2:
        total += float(st["computing_ms"].max() - st["computing_ms"].min())
    ri = store.read_table(rid, "rank_imbalance")
    if ri is not None and len(ri):
        total += float(
            ri.loc[ri["dimension"] == "computing", "spread_ms"].max() if (ri["dimension"] == "computing").any() else 0.0
        )
    return total


@pytest.mark.parametrize("which", ["straggler", "input_delay", "unbalanced", "unfused"])
def test_root_gains_within_the_steps_waiting_idle_and_imbalance(which, request):
    results, rec = request.getfixturevalue(which)
    store = Store(results)
    adv = store.read_table(rec["run_id"], "advice")
    roots = adv[adv["symptom_of"].isna()]
    gains = roots["gain_ms"].dropna()
    assert len(gains) and (gains >= 0).all()
    assert gains.sum() <= _budget(store, rec["run_id"]) + 1e-6, roots[["id", "gain_ms"]]
    assert gains.sum() <= rec["metrics"]["step_time_s"] * 1000.0 + 1e-6


# ---- the whole `advise --try` path ----------------------------------------------------------------------

CRASH = {"inject.crash_rank": 0, "inject.crash_step": 3}
UNSTRAGGLE = {"inject.straggler_busy_ms": 0}


def _hand_advice(step_ms: float) -> pd.DataFrame:
    """Advice rows by hand: no real finding proposes a crash (the failing fix) or names the injection knob, so the
    whole --try path is driven by rows of the contract's columns; the real ranking's knobs are tried on the
    quickstart (docs/advice.md)."""

    def row(id_, gain, change, symptom_of=None):
        return {
            "rule": id_.split(":")[0],
            "severity": "high",
            "message": id_,
            "evidence": "hand",
            "ranks": [],
            "stage": None,
            "id": id_,
            "gain_ms": gain,
            "gain_share": gain / step_ms,
            "basis": "hand-made",
            "symptom_of": symptom_of,
            "try": json.dumps(change),
            "predicted_step_ms": step_ms - gain,
        }

    return pd.DataFrame(
        [
            row("crash:0", 2 * BUSY_MS, CRASH),  # first: the fix after it must still run
            row("slow_rank:1", BUSY_MS, UNSTRAGGLE),
            row("wait_ratio:0", BUSY_MS, {"parallel.comm_fusion": "all"}, symptom_of="slow_rank:1"),
        ],
        columns=CONTRACT,
    )


def test_advise_try_runs_the_fixes_and_measures_them(straggler, tmp_path):
    src, rec = straggler
    results = tmp_path / "results"
    shutil.copytree(src, results)  # the hand-made advice must not replace the real one the other tests read
    store = Store(results)
    rid = rec["run_id"]
    step_ms = rec["metrics"]["step_time_s"] * 1000
    store.write_table(rid, "advice", _hand_advice(step_ms))
    r = run_perfbench("advise", rid, "--results", results, "--try", "2", "--repeats", "1", "--json", timeout=900)
    out = json.loads(r.stdout)
    tried = out["tried"]
    assert [f["finding"] for f in tried["fixes"]] == ["crash:0", "slow_rank:1"]  # the symptom is never tried
    assert "round 1/1" in r.stderr and ": started" in r.stderr  # progress while the runs go

    crash, fix = tried["fixes"]
    assert crash["status"] == "failed" and "rank 0 crashing at step 3" in crash["error"]
    assert crash["measured_gain_ms"] is None and crash["predicted_gain_ms"] == pytest.approx(2 * BUSY_MS)
    assert fix["status"] == "ok" and fix["n_fix"] == 1 and fix["n_base"] == 1
    # the straggler burned BUSY_MS of CPU per step in the original's re-run: removing it must show
    assert fix["measured_gain_ms"] > 0.25 * BUSY_MS, tried
    assert fix["measured_gain_ms"] == pytest.approx(fix["base_step_ms"] - fix["fix_step_ms"])
    assert fix["measured_low_ms"] is None  # one run a side: no interval

    runs = {x["run_id"]: x for x in store.list_runs() if x.get("source") == "advise"}
    assert set(runs) == {*tried["original"]["runs"], *crash["runs"], *fix["runs"]} and len(runs) == 3
    (orig_id,) = tried["original"]["runs"]
    assert runs[orig_id]["advise"] == {"of": rid, "finding": None, "try": {}, "round": 1}
    assert runs[crash["runs"][0]]["status"] == "failed" and "crashing at step 3" in runs[crash["runs"][0]]["error"]
    fixed = runs[fix["runs"][0]]
    assert fixed["status"] == "ok" and fixed["advise"] == {
        "of": rid,
        "finding": "slow_rank:1",
        "try": UNSTRAGGLE,
        "round": 1,
    }
    # the same configuration with only the knob changed (and the profiler off)
    strip = ("run_id", "repeat", "output_dir", "threads_per_rank", "profile")
    want = {k: v for k, v in rec["config"].items() if k not in strip}
    want["inject"] = dict(want["inject"], straggler_busy_ms=0)
    assert {k: v for k, v in fixed["config"].items() if k not in strip} == want
    assert fixed["config"]["profile"]["enabled"] is False
    # the kept trials: one row per fix, prediction next to measurement
    trials = store.read_advice_trials()
    assert list(trials["finding"]) == ["crash:0", "slow_rank:1"] and set(trials["of"]) == {rid}
    assert trials["measured_gain_ms"].iloc[1] == pytest.approx(fix["measured_gain_ms"])
