"""Slow ranks (Dixon's Q / 3-sigma on per-rank lateness) and slow links, on hand-built tables with
hand-computed expectations, and on real profiles (sets F and G)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analyzers.analyses.slow_ranks import (
    DIXON_Q95,
    MIN_TRANSFER_MB,
    SLOW_LINK_RATIO,
    find_slow_links,
    find_slow_ranks,
)
from tests.support import fixture_path


def _ops(waits: dict[int, list[float]], elapse=10.0, group="g", names=("ar",)):
    """waits[rank] = wait_ms per step; one collective per name per step."""
    rows = []
    for r, ws in waits.items():
        for step, w in enumerate(ws):
            for n in names:
                rows.append(
                    {
                        "rank": r,
                        "step": step,
                        "op_name": n,
                        "group": group,
                        "wait_ms": w,
                        "transit_ms": 1.0,
                        "elapse_ms": elapse,
                    }
                )
    return pd.DataFrame(rows)


def _top(df, scope="group"):
    g = df[df["scope"] == scope]
    return g.loc[g["mean_lateness_ms"].idxmax()]


def test_dixon_flags_the_rank_others_wait_for():
    # rank 3 arrives last: it waits ~0, the others wait ~6 ms for it
    waits = {0: [6.0, 6.2, 5.8], 1: [5.9, 6.1, 6.0], 2: [6.1, 5.9, 6.2], 3: [0.0, 0.0, 0.0]}
    res = find_slow_ranks(_ops(waits))
    top = _top(res)
    assert top["rank"] == 3 and bool(top["slow"])
    assert top["test"] == "dixon_q"
    # lateness per step = max wait - own wait: rank 3 -> 6.1, 6.2, 6.2
    assert top["mean_lateness_ms"] == pytest.approx((6.1 + 6.2 + 6.2) / 3)
    # Q = (x_max - x_second) / (x_max - x_min) over the ranks' mean lateness
    lat = {r: sum(max(waits[k][s] for k in waits) - waits[r][s] for s in range(3)) / 3 for r in waits}
    xs = sorted(lat.values())
    assert top["statistic"] == pytest.approx((xs[-1] - xs[-2]) / (xs[-1] - xs[0]))
    assert top["critical"] == DIXON_Q95[4]
    assert top["last_arrivals"] == 3
    assert res["slow"].sum() == 1


def test_no_outlier_when_lateness_is_spread():
    waits = {0: [1.0, 2.0], 1: [2.0, 3.0], 2: [3.0, 1.0], 3: [0.0, 0.5]}
    res = find_slow_ranks(_ops(waits))
    assert not res["slow"].any()


def test_practical_floor_blocks_tiny_lateness():
    # a clean outlier, but only 0.05 ms late on 10 ms collectives (< 10 %)
    waits = {0: [0.05] * 3, 1: [0.05] * 3, 2: [0.05] * 3, 3: [0.0] * 3}
    res = find_slow_ranks(_ops(waits, elapse=10.0))
    top = _top(res)
    assert top["rank"] == 3 and top["statistic"] == pytest.approx(1.0)
    assert not bool(top["slow"])


def test_three_sigma_for_large_groups():
    n = 16
    waits = {r: [5.0 + 0.01 * (r % 3)] * 4 for r in range(n)}
    waits[7] = [0.0] * 4
    res = find_slow_ranks(_ops(waits))
    top = _top(res)
    assert top["test"] == "3sigma" and top["rank"] == 7 and bool(top["slow"])
    lat = {r: max(waits[k][0] for k in waits) - waits[r][0] for r in waits}
    others = pd.Series([v for r, v in lat.items() if r != 7])
    assert top["statistic"] == pytest.approx((lat[7] - others.mean()) / others.std(ddof=1))


def test_pairs_use_last_arrival_share_and_sign_test():
    # rank 1 last in 9 of 10: share 0.9 >= 0.75 and P[X >= 9 | 10, 1/2] = 11/1024 < 0.05
    w0 = [4.0] * 9 + [0.0]
    w1 = [0.0] * 9 + [4.0]
    top = _top(find_slow_ranks(_ops({0: w0, 1: w1})))
    assert top["test"] == "pair" and top["rank"] == 1
    assert top["statistic"] == pytest.approx(0.9) and bool(top["slow"])
    # 3 of 4 reaches the share but not the sign test (P = 5/16)
    top = _top(find_slow_ranks(_ops({0: [4.0, 4.0, 4.0, 0.0], 1: [0.0, 0.0, 0.0, 4.0]})))
    assert top["statistic"] == pytest.approx(0.75) and not bool(top["slow"])
    res = find_slow_ranks(_ops({0: [4.0, 4.0, 0.0, 0.0], 1: [0.0, 0.0, 4.0, 4.0]}))
    assert not res["slow"].any()


def test_groups_and_collectives_are_separate():
    a = _ops({0: [5.0, 5.0], 1: [5.0, 5.0], 2: [0.0, 0.0]}, group="dp0", names=("ar1", "ar2"))
    b = _ops({3: [1.0, 1.0], 4: [1.0, 1.0], 5: [1.0, 1.0]}, group="dp1")
    res = find_slow_ranks(pd.concat([a, b]))
    assert set(res["group"]) == {"dp0", "dp1"}
    slow = res[res["slow"]]
    assert set(zip(slow["group"], slow["scope"], slow["op_name"], slow["rank"])) == {
        ("dp0", "group", "", 2),
        ("dp0", "collective", "ar1", 2),
        ("dp0", "collective", "ar2", 2),
    }


def test_start_time_fallback_without_wait():
    rows = []
    for step in range(3):
        for r in range(4):
            rows.append(
                {
                    "rank": r,
                    "step": step,
                    "op_name": "ar",
                    "group": "",
                    "start_us": 1000.0 * step + (900.0 if r == 1 else 10.0 * r),
                    "elapse_ms": 1.0,
                }
            )
    res = find_slow_ranks(pd.DataFrame(rows))
    top = _top(res)
    assert top["rank"] == 1 and bool(top["slow"])
    assert top["mean_lateness_ms"] == pytest.approx(0.9)


def test_empty_inputs():
    assert find_slow_ranks(pd.DataFrame()).empty
    assert find_slow_links(pd.DataFrame(), pd.DataFrame()).empty
    assert find_slow_links(None, None).empty


def test_slow_link_below_group_average():
    links = pd.DataFrame(
        [
            {
                "group": "g",
                "src": s,
                "dst": (s + 1) % 4,
                "transport": "HCCS",
                "size_mb": 100.0,
                "time_ms": t,
                "step": 0,
                "op_name": "ar",
            }
            for s, t in zip(range(4), [5.0, 5.0, 5.0, 20.0])
        ]
        + [
            {
                "group": "g",
                "src": 0,
                "dst": 0,
                "transport": "LOCAL",
                "size_mb": 100.0,
                "time_ms": 100.0,
                "step": 0,
                "op_name": "ar",
            }
        ]
    )
    res = find_slow_links(links, None)
    assert len(res) == 4  # LOCAL and self links are ignored
    mean = (20 + 20 + 20 + 5) / 4
    slow = res[res["slow"]]
    assert list(zip(slow["src"], slow["dst"])) == [(3, 0)]
    assert slow["bandwidth_gbps"].iloc[0] == pytest.approx(5.0)
    assert slow["group_mean_gbps"].iloc[0] == pytest.approx(mean)
    assert slow["ratio"].iloc[0] == pytest.approx(5.0 / mean) and 5.0 / mean < SLOW_LINK_RATIO


def test_small_transfers_do_not_count():
    links = pd.DataFrame(
        [
            {"group": "g", "src": 0, "dst": 1, "transport": "RDMA", "size_mb": 50.0, "time_ms": 5.0},
            {"group": "g", "src": 1, "dst": 0, "transport": "RDMA", "size_mb": 50.0, "time_ms": 5.0},
        ]
        + [{"group": "g", "src": 2, "dst": 0, "transport": "RDMA", "size_mb": MIN_TRANSFER_MB / 2, "time_ms": 1.0}] * 40
    )
    res = find_slow_links(links, None)
    assert set(zip(res["src"], res["dst"])) == {(0, 1), (1, 0)} and not res["slow"].any()


def test_rank_bandwidth_from_comm_bandwidth():
    cb = pd.DataFrame(
        [
            {
                "rank": r,
                "step": s,
                "op_name": "ar",
                "transport": "SDMA",
                "size_mb": 64.0,
                "time_ms": 4.0 if r != 2 else 16.0,
            }
            for r in range(4)
            for s in range(2)
        ]
    )
    res = find_slow_links(None, cb)
    assert set(res["kind"]) == {"rank"}
    slow = res[res["slow"]]
    assert list(slow["src"]) == [2]
    assert slow["size_mb"].iloc[0] == pytest.approx(128.0) and slow["bandwidth_gbps"].iloc[0] == pytest.approx(4.0)


# ---- real profiles -----------------------------------------------------------------------------------


def test_on_set_f_two_devices():
    from analyzers.parsers import msprof

    p = msprof.parse(fixture_path("mindspore-ai__mindinsight", "tests", "utils", "resource", "profiler"))
    res = find_slow_ranks(p.comm_ops)
    g = res[res["scope"] == "group"]
    assert sorted(g["rank"]) == [0, 1] and set(g["test"]) == {"pair"}
    assert g["n_ops"].tolist() == [10, 10]
    # lateness recomputed by hand from the two ranks' waits per iteration
    co = p.comm_ops.pivot_table(index="step", columns="rank", values="wait_ms")
    late = co.max(axis=1).to_numpy()[:, None] - co.to_numpy()
    for i, r in enumerate(co.columns):
        assert g.set_index("rank").loc[r, "mean_lateness_ms"] == pytest.approx(late[:, i].mean())
    links = find_slow_links(p.links, p.comm_bandwidth)
    assert {"HCCS", "PCIE"} <= set(links["transport"])
    assert not math.isnan(links["ratio"].iloc[0])


def test_on_set_g_pipeline_groups():
    from analyzers.parsers.legacy import parse

    p = parse(fixture_path("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose"))
    res = find_slow_ranks(p.comm_ops)
    g = res[res["scope"] == "group"]
    # DP groups are the two pipeline stages; send/recv (group "p2p") never match across stages
    assert set(zip(g["group"], g["rank"])) == {("stage0", 0), ("stage0", 1), ("stage1", 2), ("stage1", 3)}


def test_sign_test_matches_the_binomial_tail():
    from scipy.stats import binom

    from analyzers.analyses.slow_ranks import sign_test_p

    for k, n in [(5, 5), (8, 10), (60, 100), (1010, 2000), (1500, 2000), (2550, 5000), (1, 1)]:
        expected = binom.sf(k - 1, n, 0.5)
        assert abs(sign_test_p(k, n) - expected) <= max(1e-9, 0.02 * expected), (k, n)
    assert sign_test_p(0, 3) == 1.0 and sign_test_p(4, 3) == 0.0


def test_pairs_also_find_a_straggler_by_time():
    # two collectives per step, 2 steps: at the first ("a") rank 0 waits 300 ms for rank 1 (its host work before
    # the step); at the second ("b") rank 1 waits 0.2 ms. Rank 1 is last in 2 of 4 (share 0.5: no count
    # evidence), but its summed lateness is 2 x 300 = 600 ms of the pair's 600 + 2 x 0.2 = 600.4 ms:
    # 600 / 600.4 = 0.99933 >= PAIR_LATENESS_SHARE (0.9)
    rows = []
    for step in range(2):
        for name, w0, w1 in (("a", 300.0, 0.0), ("b", 0.0, 0.2)):
            rows += [
                {
                    "rank": r,
                    "step": step,
                    "op_name": name,
                    "group": "g",
                    "wait_ms": w,
                    "elapse_ms": w + 1.0,
                    "transit_ms": 1.0,
                }
                for r, w in ((0, w0), (1, w1))
            ]
    res = find_slow_ranks(pd.DataFrame(rows))
    g = res[(res["scope"] == "group") & (res["rank"] == 1)].iloc[0]
    assert bool(g["slow"]) and g["last_arrivals"] == 2 and g["n_ops"] == 4
    assert g["statistic"] == pytest.approx(600.0 / 600.4) and g["critical"] == 0.9
    assert g["total_lateness_ms"] == pytest.approx(600.0)
    assert not res[(res["scope"] == "group") & (res["rank"] == 0)]["slow"].any()
    # time share 0.75 (3 x 4 of 16 ms, the 3-of-4 case above): neither count nor time evidence
    even = find_slow_ranks(_ops({0: [4.0, 4.0, 4.0, 0.0], 1: [0.0, 0.0, 0.0, 4.0]}))
    assert not even[even["scope"] == "group"]["slow"].any()


def test_the_time_share_is_a_group_test_only():
    # one collective, rank 1 last in 4 of 4 steps by 0.15 ms: time share 1.0, but 4 instances are the count
    # test's to judge (P = 1/16 > 0.05): not slow, at collective or group scope (one name: no collective rows)
    res = find_slow_ranks(_ops({0: [0.15] * 4, 1: [0.0] * 4}, elapse=1.0, names=("a", "b")))
    col = res[res["scope"] == "collective"]
    assert len(col) and not col["slow"].any()
    grp = res[(res["scope"] == "group") & (res["rank"] == 1)].iloc[0]
    # at group scope the 8 instances pass the count test (8 of 8, P = 1/256; 0.15 ms >= 10% of the 1 ms elapse)
    assert bool(grp["slow"]) and grp["statistic"] == pytest.approx(1.0) and grp["critical"] == 0.75
