"""`perfbench show`: short run ids as `ls` shows them (and prefixes; ambiguity lists the runs), the verdict
first, formatted tables, flagged rows only with a count, nothing cut, `--json` keeps every row."""

from __future__ import annotations

import json

import pytest

from perfbench.store import Store
from tests.support import perfbench_in_process, run_perfbench


def _record(run_id: str, sweep_id: str, ws: int, status: str = "failed") -> dict:
    return {
        "run_id": run_id,
        "sweep_id": sweep_id,
        "source": "sweep",
        "status": status,
        "error": f"rank 1 exited with code 3 at step 2 ({run_id})" if status == "failed" else None,
        "settings": {"workload": "resnet50", "world_size": ws, "repeat": 0},
        "config": {},
        "env": {},
        "timings": {},
        "metrics": {},
    }


@pytest.fixture()
def two_sweeps(tmp_path):
    """Two sweeps of the same config: `ws2-r0` exists in both, `ws4-r0` in one only."""
    res = tmp_path / "results"
    store = Store(res)
    for sweep in ("quick-20261123-100000", "quick-20261123-110000"):
        store.write_run(_record(f"{sweep}-ws2-r0", sweep, 2))
    store.write_run(_record("quick-20261123-110000-ws4-r0", "quick-20261123-110000", 4))
    return res


def test_short_id_prefix_and_ambiguity(two_sweeps):
    cli = perfbench_in_process
    # the short id `ls` shows, unique across the store
    out = cli("show", "ws4-r0", "--results", two_sweeps, "--json").stdout
    assert json.loads(out)["run_id"] == "quick-20261123-110000-ws4-r0"
    # a unique prefix of a full id, and of a short id
    assert (
        json.loads(cli("show", "quick-20261123-10", "--results", two_sweeps, "--json").stdout)["run_id"]
        == "quick-20261123-100000-ws2-r0"
    )
    assert (
        json.loads(cli("show", "ws4", "--results", two_sweeps, "--json").stdout)["run_id"]
        == "quick-20261123-110000-ws4-r0"
    )
    # ambiguous: one line naming every match, exit 2, no traceback
    for cmd in (["show", "ws2-r0"], ["trace", "ws2-r0", "-o", str(two_sweeps / "t.json")], ["compare", "ws2", "ws4"]):
        r = cli(*cmd, "--results", two_sweeps, check=False)
        assert r.returncode == 2, (cmd, r.stderr)
        err = r.stderr.strip()
        assert "\n" not in err and "Traceback" not in err
        assert (
            "quick-20261123-100000-ws2-r0" in err and "quick-20261123-110000-ws2-r0" in err and "matches 2 runs" in err
        )
    r = run_perfbench("show", "ws8", "--results", two_sweeps, check=False)  # and once through `python -m`
    assert r.returncode == 2 and "no run 'ws8'" in r.stderr


def test_failed_run_shows_its_reason(two_sweeps):
    out = run_perfbench("show", "ws4-r0", "--results", two_sweeps).stdout
    assert "failed" in out and "rank 1 exited with code 3 at step 2" in out


def test_show_leads_with_the_verdict_and_formats_every_table(imported_store):
    store = Store(imported_store)
    rec = store.list_runs()[0]
    rid = rec["run_id"]
    out = run_perfbench("show", "analyze-level1", "--results", imported_store).stdout
    advice = store.read_table(rid, "advice")
    top = advice[advice["severity"] == "high"].iloc[0]
    flat = " ".join(out.split())
    # verdict first: the high-severity advice and its evidence, in full, before the numbers
    assert flat.index("Verdict") < flat.index(" ".join(top["message"].split())) < flat.index("Key numbers")
    assert " ".join(top["evidence"].split()) in flat
    # every other advice in full too (wrapped, never cut)
    for msg in advice["message"]:
        assert " ".join(msg.split()) in flat
    assert "..." not in out and "NaN" not in out and "e+15" not in out and "e+1" not in out
    # key numbers with units, from the run record (catalogue format: seconds shown in ms, shares in %)
    m = rec["metrics"]
    assert f"{1000 * m['step_time_s']:.1f} ms" in out
    assert f"{100 * m['comm_share']:.1f}%" in out
    # per-rank breakdown in ms and % of the step, from the stored rank_breakdown
    rb = store.read_table(rid, "rank_breakdown").set_index("rank")
    for rank in (0, 1):
        comp = rb.loc[rank, "computing_us"]
        assert f"{comp / 1000:.2f} ms ({100 * comp / rb.loc[rank, 'step_us']:.1f}%)" in out
    # collectives: the profiler's op names with bus bandwidth in GB/s
    # (a narrow screen leaves the lower-priority columns out and names them; --wide shows every one)
    assert "hcom_allReduce__586_0_1" in out and ("GB/s" in out or "bus bw" in flat)
    wide = run_perfbench("show", "analyze-level1", "--results", imported_store, "--wide").stdout
    assert "GB/s" in wide
    # flagged rows only, with how many were tested
    slow = store.read_table(rid, "slow_ranks")
    assert f"Slow ranks: {int(slow['slow'].sum())} of {len(slow)} rank tests flagged" in flat
    links = store.read_table(rid, "slow_links")
    assert f"Slow links: {int(links['slow'].sum())} of {len(links)} links flagged" in flat


def test_show_json_keeps_every_row(imported_store):
    store = Store(imported_store)
    rid = store.list_runs()[0]["run_id"]
    doc = json.loads(run_perfbench("show", rid, "--results", imported_store, "--json").stdout)
    for name in ("slow_ranks", "comm_ops", "advice", "links", "kernels"):
        assert len(doc["tables"][name]) == len(store.read_table(rid, name)), name
    assert doc["tables"]["profile_ops"]["rows"] == len(store.read_table(rid, "profile_ops"))
    assert doc["metrics"] == store.get_run(rid)["metrics"]
