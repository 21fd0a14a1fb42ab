"""Golden tests for the Ascend (torch_npu / MindSpore) exports and msprof-analyze's output, sets B0-2, C0-2,
E, J, K, L (plus H run_2, a profile without step data): `perfbench analyze DIR --json --no-store` is run as a user
would, on a temp copy, and every number it reports is compared with the profiler's own files, read here
at test time:

* breakdown per rank and step: step_trace_time.csv (text), analysis.db StepTraceTime (db),
  cluster_step_trace_time.csv (msprof-analyze); within 1% of the step time (tests/support/golden.py);
* per-op communication: communication.json / analysis.db CommAnalyzerTime / cluster_communication.json
  (elapse, transit, wait, synchronization, idle) within 1%; where the files hold no such number
  (level 0: kernels only) it must be null;
* kernels: sums of the kernel table (kernel_details.csv, the profiler db's TASK x COMPUTE_TASK_INFO,
  op_summary) per (type, core) within 1%, the type being the kernel name where the profiler wrote "N/A";
* every rank analyzed is listed (`source.ranks` == len(ranks)), with the files it was read from.

Then copies with files removed from one rank (kernels, trace, step trace, communication, the profiler db,
analysis.db) and with rows cut from kernel_details.csv: the other rank is unchanged, the damaged rank
reports what it still has, and a warning names the missing file.
"""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.support import fixture_path, perfbench_in_process, run_perfbench
from tests.support.golden import REL, analyze_json, check_step, close, reported_steps

B = ("Ascend__msinsight", "test", "data", "pytorch", "text")
C = ("Ascend__msinsight", "test", "data", "pytorch", "db")
E = ("Ascend__msprof-analyze", "test", "resource", "advisor", "cluster_analysis_output")
J = (
    "hicann__oam-tools",
    "experiment",
    "task-book",
    "msprof_tool_experience_imaginationhh",
    "perf-data",
    "hdspace-32g-outer-17_59186_20260601142437309_ascend_pt",
)
K = (
    "hicann__oam-tools",
    "experiment",
    "task-book",
    "msprof_experience_weixin_63089733",
    "perf-data",
    "20260624_matmul_basic_api_board",
)
L_RUN = ("vllm-project__vllm-ascend", ".tmp_remote_patch", "prof_unpack", "PROF_GROUP_20260823_165254", "PROF_Memory")
H2 = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "run_2")
OUT = "ASCEND_PROFILER_OUTPUT"
NA = {"", "N/A", "NA"}
PARTS = {
    "Computing": "computing_us",
    "Communication(Not Overlapped)": "communication_not_overlapped_us",
    "Overlapped": "overlapped_us",
    "Communication": "communication_us",
    "Free": "free_us",
    "Preparing": "preparing_us",
    "Bubble": "bubble_us",
    "Stage": "stage_us",
}
DB_PARTS = {
    "computing": "computing_us",
    "communication_not_overlapped": "communication_not_overlapped_us",
    "overlapped": "overlapped_us",
    "communication": "communication_us",
    "free": "free_us",
    "preparing": "preparing_us",
    "bubble": "bubble_us",
    "stage": "stage_us",
}
COMM = {
    "Elapse Time(ms)": "elapse_ms",
    "Transit Time(ms)": "transit_ms",
    "Wait Time(ms)": "wait_ms",
    "Synchronization Time(ms)": "synchronization_ms",
    "Idle Time(ms)": "idle_ms",
}
DB_COMM = {
    "elapse_time": "elapse_ms",
    "transit_time": "transit_ms",
    "wait_time": "wait_ms",
    "synchronization_time": "synchronization_ms",
    "idle_time": "idle_ms",
}


# ---- the profiler's own numbers ------------------------------------------------------------------------


def _num(v) -> float:
    return float(str(v).strip().strip("\t"))


def _step(s) -> int:
    return int("".join(ch for ch in str(s) if ch.isdigit()) or 0)


def _rank_of(rank_dir: Path) -> int:
    """rank_id of profiler_info*.json; a single-device run without one (set J) is rank 0."""
    info = next(rank_dir.glob("profiler_info*.json"))
    r = json.loads(info.read_text()).get("rank_id", -1)
    return int(r) if int(r) >= 0 else 0


def _want_step(row: dict, parts: dict) -> dict:
    """Expected STEP fields from one profiler breakdown row: step_us = Stage + Bubble (the profiler's step
    time: Stage = Computing + Communication(Not Overlapped) + Free), the parts as written."""
    w = {ours: _num(row[k]) for k, ours in parts.items() if k in row and str(row[k]).strip() != ""}
    w["step_us"] = (
        w["stage_us"] + w.get("bubble_us", 0.0)
        if "stage_us" in w
        else (w["computing_us"] + w["communication_not_overlapped_us"] + w["free_us"])
    )
    return w


def text_step_trace(rank_dir: Path) -> dict[tuple[int, int], dict]:
    r = _rank_of(rank_dir)
    with open(rank_dir / OUT / "step_trace_time.csv", newline="", encoding="utf-8-sig") as fh:
        return {(r, _step(row["Step"])): _want_step(row, PARTS) for row in csv.DictReader(fh)}


def db_rows(db: Path, sql: str) -> list[dict]:
    con = sqlite3.connect(f"file:{db}?immutable=1", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql)]
    finally:
        con.close()


def db_step_trace(rank_dir: Path) -> dict[tuple[int, int], dict]:
    r = _rank_of(rank_dir)
    return {
        (r, _step(row["step"])): _want_step(row, DB_PARTS)
        for row in db_rows(rank_dir / OUT / "analysis.db", "SELECT * FROM StepTraceTime")
    }


def text_comm(rank_dir: Path) -> dict[tuple[int, str], dict]:
    r = _rank_of(rank_dir)
    data = json.loads((rank_dir / OUT / "communication.json").read_text())
    out = {}
    for _, kinds in data.items():
        for _, ops in kinds.items():
            for key, op in ops.items():
                if key != "Total Op Info":
                    out[(r, key.split("@")[0])] = {ours: op["Communication Time Info"][k] for k, ours in COMM.items()}
    return out


def db_comm(rank_dir: Path) -> dict[tuple[int, str], dict]:
    r = _rank_of(rank_dir)
    rows = db_rows(rank_dir / OUT / "analysis.db", "SELECT * FROM CommAnalyzerTime")
    return {
        (r, row["hccl_op_name"]): {ours: row[k] for k, ours in DB_COMM.items()}
        for row in rows
        if row["hccl_op_name"] != "Total Op Info"
    }


def text_kernels(rank_dirs) -> dict[tuple[str, str], list]:
    """(type or name where N/A, core) -> [count, total us] of the compute rows of kernel_details.csv."""
    out: dict = {}
    for d in rank_dirs:
        with open(d / OUT / "kernel_details.csv", newline="", encoding="utf-8-sig") as fh:
            for row in csv.DictReader(fh):
                core = row.get("Accelerator Core", "")
                if core == "HCCL" or row["Name"].startswith("hcom_"):
                    continue
                typ = row.get("Type", "N/A")
                key = (row["Name"] if typ in NA else typ, "" if core in NA else core)
                acc = out.setdefault(key, [0, 0.0])
                acc[0] += 1
                acc[1] += _num(row["Duration(us)"])
    return out


def db_kernels(rank_dirs) -> dict[tuple[str, str], list]:
    out: dict = {}
    for d in rank_dirs:
        db = next((d / OUT).glob("ascend_pytorch_profiler_*.db"))
        for row in db_rows(
            db,
            """SELECT s.value AS name, ot.value AS type, tt.value AS core, t.endNs - t.startNs AS ns
                                  FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId
                                  LEFT JOIN STRING_IDS s ON s.id = c.name LEFT JOIN STRING_IDS ot ON ot.id = c.opType
                                  LEFT JOIN STRING_IDS tt ON tt.id = c.taskType""",
        ):
            key = (
                row["name"] if row["type"] in NA or row["type"] is None else row["type"],
                "" if row["core"] in NA or row["core"] is None else row["core"],
            )
            acc = out.setdefault(key, [0, 0.0])
            acc[0] += 1
            acc[1] += row["ns"] / 1e3
    return out


def check_kernels(doc: dict, want: dict) -> int:
    n = 0
    for k in doc["kernels"]:
        if k["category"] != "compute":
            continue
        key = (k["type"], k["core_type"] or "")
        assert key in want, (key, "not a (type, core) of the profiler's kernel table")
        assert k["count"] == want[key][0], (key, k["count"], want[key][0])
        close(k["total_us"], want[key][1], key)
        n += 1
    return n


def check_comm(doc: dict, want: dict) -> None:
    got = {(c["rank"], c["op_name"]): c for c in doc["communication"]}
    assert set(got) == set(want)
    for key, w in want.items():
        for f, v in w.items():
            assert got[key][f] is not None and abs(got[key][f] - v) <= REL * max(abs(v), 1e-6), (key, f, got[key][f], v)


def check_all_steps(doc: dict, want: dict) -> None:
    got = reported_steps(doc)
    assert set(got) == set(want), (sorted(got), sorted(want))
    for key, w in want.items():
        check_step(got[key], w, key)


def _copy(tmp_path: Path, parts) -> Path:
    dst = tmp_path / parts[-1]
    shutil.copytree(fixture_path(*parts), dst)
    return dst


def _rank_dirs(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith("_ascend_pt"))


# ---- sets B (text) and C (db), levels 0-2 ----------------------------------------------------------------


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_set_b_text(tmp_path, level):
    d = _copy(tmp_path, B + (level,))
    doc = analyze_json(d)
    ranks = _rank_dirs(d)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == len(ranks) == 2
    assert doc["warnings"] == []
    want = {}
    for r in ranks:
        want.update(text_step_trace(r))
    check_all_steps(doc, want)
    assert doc["source"]["reference"] == ["step_trace_time.csv"]
    for r in doc["ranks"]:
        assert {"kernel_details.csv", "step_trace_time.csv", "trace_view.json"} <= set(r["inputs"])
    assert check_kernels(doc, text_kernels(ranks)) > 5
    if level == "level0":  # no communication.json: only the kernels' elapse is known, the rest is null
        assert doc["communication"], "level 0 still has its HCCL kernels"
        for c in doc["communication"]:
            assert all(c[f] is None for f in ("transit_ms", "wait_ms", "synchronization_ms", "idle_ms")), c
    else:
        comm = {}
        for r in ranks:
            comm.update(text_comm(r))
        check_comm(doc, comm)


@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
def test_set_c_db(tmp_path, level):
    d = _copy(tmp_path, C + (level,))
    doc = analyze_json(d)
    ranks = _rank_dirs(d)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 2 and doc["warnings"] == []
    want = {}
    for r in ranks:
        want.update(db_step_trace(r))
    check_all_steps(doc, want)
    assert doc["source"]["reference"] == ["analysis.db StepTraceTime"]
    assert check_kernels(doc, db_kernels(ranks)) > 5
    if level == "level0":
        for c in doc["communication"]:
            assert all(c[f] is None for f in ("transit_ms", "wait_ms", "synchronization_ms", "idle_ms")), c
    else:
        comm = {}
        for r in ranks:
            comm.update(db_comm(r))
        check_comm(doc, comm)


def test_level0_kernel_types_text_and_db_same_rule(tmp_path):
    """Level 0 writes Type "N/A" in both exports; both readers report the kernel name
    instead (never "N/A"), so the same kernel gets the same type in either export."""
    types = {}
    for name, parts in (("text", B + ("level0",)), ("db", C + ("level0",))):
        d = _copy(tmp_path / name, parts)
        doc = analyze_json(d)
        rows = [k for k in doc["kernels"] if k["category"] == "compute"]
        assert rows and not any(k["type"] in NA or k["type"] is None for k in rows), rows[:3]
        assert not any(k["core_type"] in ("N/A",) for k in rows)
        types[name] = {k["type"] for k in rows}
    # the same model in both runs: its biggest kernels carry the same names -> the same types
    assert len(types["text"] & types["db"]) >= 5, (sorted(types["text"])[:10], sorted(types["db"])[:10])


# ---- E (msprof-analyze output), J (multi-step single rank), K and L (msprof, one kernel) ----------------


def test_set_e_cluster_output(tmp_path):
    d = _copy(tmp_path, E)
    doc = analyze_json(d)
    with open(d / "cluster_step_trace_time.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Type"] == "rank"]
    want = {(int(r["Index"]), _step(r["Step"])): _want_step(r, PARTS) for r in rows}
    check_all_steps(doc, want)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == len(rows) == 8
    data = json.loads((d / "cluster_communication.json").read_text())
    comm = {}
    for _, steps in data.items():
        for _, ops in steps.items():
            for key, per_rank in ops.items():
                if not key.startswith("Total Op Info"):
                    for r, op in per_rank.items():
                        comm[(int(r), key.split("@")[0])] = {
                            ours: op["Communication Time Info"][k] for k, ours in COMM.items()
                        }
    check_comm(doc, comm)


def test_set_j_multi_step(tmp_path):
    d = _copy(tmp_path, J)
    doc = analyze_json(d)
    want = text_step_trace(d)
    assert len(want) == 5
    check_all_steps(doc, want)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 1
    assert check_kernels(doc, text_kernels([d])) == 2  # MatMulV2 and Gelu
    assert doc["communication"] == []


def _op_summary_kernels(d: Path) -> dict:
    out: dict = {}
    for f in d.rglob("op_summary_*.csv"):
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                typ = row["OP Type"] if row["OP Type"] not in NA else row["Op Name"]
                acc = out.setdefault((typ, row["Task Type"]), [0, 0.0])
                acc[0] += 1
                acc[1] += _num(row["Task Duration(us)"])
    return out


@pytest.mark.parametrize("parts", [K, L_RUN], ids=["K", "L"])
def test_sets_k_l_kernels_and_one_rank(tmp_path, parts):
    d = _copy(tmp_path, parts)
    doc = analyze_json(d)
    want = _op_summary_kernels(d)
    got = {(k["type"], k["core_type"]): k for k in doc["kernels"]}
    assert set(got) == set(want)
    for key, (count, total) in want.items():
        assert got[key]["count"] == count
        close(got[key]["total_us"], total, key)
    # no step data in these files: one rank, its breakdown unknown (no step rows), never zeros
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 1


@pytest.mark.parametrize("parts", [K, L_RUN, H2], ids=["K", "L", "H-run_2"])
def test_source_ranks_counts_every_rank_analyzed(tmp_path, parts):
    """A profile without step data still has its rank: source.ranks == len(ranks) == 1,
    and the rank lists the files it was read from."""
    d = _copy(tmp_path, parts)
    doc = analyze_json(d)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 1
    assert doc["ranks"][0]["inputs"], doc["ranks"][0]
    assert doc["summary"].get("ranks") in (None, 1)


# ---- damaged copies: files removed from one rank, rows cut ---------------------------------------------


def _remove(d: Path, rank: str, *names: str) -> None:
    for n in names:
        (d / rank / OUT / n).unlink()


def _same_rank(doc: dict, ref: dict, rank: int) -> None:
    """The untouched rank reports exactly what it reports in the intact copy."""
    a = next(r for r in doc["ranks"] if r["rank"] == rank)
    b = next(r for r in ref["ranks"] if r["rank"] == rank)
    assert a["steps"] == b["steps"] and a["inputs"] == b["inputs"]
    ca = sorted((c["op_name"], c["elapse_ms"], c["wait_ms"]) for c in doc["communication"] if c["rank"] == rank)
    cb = sorted((c["op_name"], c["elapse_ms"], c["wait_ms"]) for c in ref["communication"] if c["rank"] == rank)
    assert ca == cb


@pytest.fixture(scope="module")
def intact_b1(tmp_path_factory):
    d = tmp_path_factory.mktemp("intact") / "level1"
    shutil.copytree(fixture_path(*B, "level1"), d)
    return analyze_json(d), d


@pytest.mark.parametrize(
    "removed",
    [
        ("kernel_details.csv", "trace_view.json"),
        ("kernel_details.csv",),
        ("trace_view.json",),
        ("step_trace_time.csv",),
        ("communication.json", "communication_matrix.json"),
    ],
    ids=["kernels+trace", "kernels", "trace", "step-trace", "communication"],
)
def test_b1_file_removed_from_one_rank(tmp_path, intact_b1, removed):
    """One rank without a file still counts; the warning names it."""
    ref, intact = intact_b1
    d = _copy(tmp_path, B + ("level1",))
    _remove(d, "rank1_ascend_pt", *removed)
    p = perfbench_in_process("analyze", d, "--json", "--no-store")
    doc = json.loads(p.stdout)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 2
    _same_rank(doc, ref, 0)
    for name in removed:
        assert any("rank1_ascend_pt" in w and f"no {name}" in w for w in doc["warnings"]), (name, doc["warnings"])
        assert name in p.stderr  # printed too
    r1 = next(r for r in doc["ranks"] if r["rank"] == 1)
    assert not set(removed) & set(r1["inputs"]) and r1["inputs"]
    want = text_step_trace(intact / "rank1_ascend_pt")
    # the breakdown: the profiler's step trace where it is there, else recomputed from the kernels (which
    # matches it to ~1e-5 of the step on this data), within 1% either way
    for key, w in want.items():
        check_step(
            reported_steps(doc)[key],
            w if "step_trace_time.csv" not in removed else {k: v for k, v in w.items() if k != "preparing_us"},
            key,
        )
    comm1 = [c for c in doc["communication"] if c["rank"] == 1]
    if "communication.json" in removed:  # only the HCCL kernels' elapse is left: the rest is unknown
        assert comm1 and all(c["wait_ms"] is None and c["transit_ms"] is None for c in comm1)
    else:
        check_comm({"communication": comm1}, text_comm(intact / "rank1_ascend_pt"))
    if "kernel_details.csv" in removed and "trace_view.json" in removed:
        assert not any(k["ranks"] == 2 for k in doc["kernels"])  # rank 1 contributes no kernels


def test_b1_damaged_file_is_a_warning_and_strict_an_error(tmp_path, intact_b1):
    ref, intact = intact_b1
    d = _copy(tmp_path, B + ("level1",))
    kd = d / "rank1_ascend_pt" / OUT / "kernel_details.csv"
    kd.write_bytes(kd.read_bytes()[: kd.stat().st_size // 2])  # cut mid-row
    doc = analyze_json(d)
    _same_rank(doc, ref, 0)
    assert any("kernel_details.csv" in w and "truncated" in w for w in doc["warnings"])
    check_step(reported_steps(doc)[(1, 50)], text_step_trace(intact / "rank1_ascend_pt")[(1, 50)], "rank 1")
    p = run_perfbench("analyze", d, "--json", "--no-store", "--strict", check=False)
    assert p.returncode == 2 and "kernel_details.csv" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_b1_sampled_kernel_table(tmp_path, intact_b1):
    """kernel_details.csv holding a sample of the kernels: the breakdown stays the profiler's; the
    recomputation from the sample is only a cross-check, and it says the rank is inconsistent."""
    ref, intact = intact_b1
    d = _copy(tmp_path, B + ("level1",))
    kd = d / "rank1_ascend_pt" / OUT / "kernel_details.csv"
    lines = kd.read_text(encoding="utf-8-sig").splitlines(keepends=True)
    kd.write_text(lines[0] + "".join(lines[1::10]))
    doc = analyze_json(d)
    _same_rank(doc, ref, 0)
    check_step(reported_steps(doc)[(1, 50)], text_step_trace(intact / "rank1_ascend_pt")[(1, 50)], "rank 1")
    r1 = next(r for r in doc["ranks"] if r["rank"] == 1)
    assert r1["consistent"] is False, r1


@pytest.fixture(scope="module")
def intact_c1(tmp_path_factory):
    d = tmp_path_factory.mktemp("intact") / "level1"
    shutil.copytree(fixture_path(*C, "level1"), d)
    return analyze_json(d), d


@pytest.mark.parametrize("removed", ["analysis.db", "ascend_pytorch_profiler_1.db"])
def test_c1_file_removed_from_one_rank(tmp_path, intact_c1, removed):
    ref, intact = intact_c1
    d = _copy(tmp_path, C + ("level1",))
    _remove(d, "rank1_ascend_pt", removed)
    doc = analyze_json(d)
    assert doc["source"]["ranks"] == len(doc["ranks"]) == 2
    _same_rank(doc, ref, 0)
    named = "ascend_*_profiler_*.db" if removed.startswith("ascend_") else removed
    assert any("rank1_ascend_pt" in w and f"no {named}" in w for w in doc["warnings"]), doc["warnings"]
    want = db_step_trace(intact / "rank1_ascend_pt")
    got = reported_steps(doc)
    for key, w in want.items():
        check_step(
            got[key], w if removed != "analysis.db" else {k: v for k, v in w.items() if k != "preparing_us"}, key
        )
    comm1 = [c for c in doc["communication"] if c["rank"] == 1]
    if removed == "analysis.db":
        assert comm1 and all(c["wait_ms"] is None for c in comm1)
    else:
        check_comm({"communication": comm1}, db_comm(intact / "rank1_ascend_pt"))
        assert not any(k["ranks"] == 2 for k in doc["kernels"])


G = ("mindspore-ai__mindinsight", "tests", "utils", "resource", "cluster_propose")


@pytest.mark.parametrize(
    "parts,label",
    [
        (B + ("level1",), "step_trace_time.csv"),
        (C + ("level1",), "analysis.db StepTraceTime"),
        (E, "msprof-analyze cluster_step_trace_time.csv"),
        (G, "mindspore-legacy files"),
    ],
    ids=["B1", "C1", "E", "G"],
)
def test_reference_is_labelled_with_what_it_is(tmp_path, parts, label):
    """The console and `source.reference` name where the profiler's own breakdown came
    from (G's comes from MindSpore's cluster analysis files, not from a step_trace_time.csv)."""
    d = _copy(tmp_path, parts)
    assert analyze_json(d)["source"]["reference"] == [label]
    out = " ".join(perfbench_in_process("analyze", d, "--no-store").stdout.split())  # rich wraps long lines
    assert f"from {label}" in out
    if label != "step_trace_time.csv":
        assert "step_trace_time " not in out and "step_trace_time)" not in out
