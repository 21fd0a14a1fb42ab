"""`perfbench mindinsight`: MindInsight 2.3.1 in its own environment really lists the session sweep's runs
and serves the same loss values the workload recorded (checked through MindInsight's HTTP API on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from perfbench.store import Store
from tests.support import free_port, run_perfbench

pytestmark = pytest.mark.timeout(2400)  # the first use creates MindInsight's environment (pip, ~470 MB)


def _free_port(lo=8060, hi=8070) -> int:
    return free_port(lo, hi)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def mi_exe():
    from perfbench.run.mindinsight import ensure_venv

    return ensure_venv(log=lambda m: print(m, file=sys.stderr))


def test_mindinsight_environment_is_isolated(mi_exe):
    """Why it needs its own environment: its protobuf pin clashes with MindSpore's (evidence, not assumption)."""
    venv_py = mi_exe.parent / "python"
    ver = subprocess.run(
        [str(venv_py), "-c", "import google.protobuf as p, mindinsight as m; print(p.__version__, m.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ver.returncode == 0, ver.stderr
    mi_protobuf, mi_version = ver.stdout.split()
    assert mi_version == "2.3.1" and int(mi_protobuf.split(".")[0]) == 3
    ours = subprocess.run(
        [sys.executable, "-c", "import google.protobuf as p; print(p.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ours.returncode == 0 and int(ours.stdout.split(".")[0]) >= 4  # what MindSpore 2.10 installs
    r = subprocess.run([sys.executable, "-c", "import mindinsight"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0  # not in the project's environment


@pytest.mark.msrun
def test_mindinsight_lists_every_run_and_serves_its_loss(sweep_store, mi_exe):
    from perfbench.run.mindinsight import MindInsight, scalar_values

    store = Store(sweep_store, create=False)
    with_summary = [
        r for r in store.list_runs() if any((store.run_dir(r["run_id"]) / "artifacts" / "summary").glob("*summary*"))
    ]
    assert with_summary, "the sweep's runs wrote no summary files (workload runner, artifacts/summary/)"
    port = _free_port()
    with MindInsight(store, port=port) as mi:
        jobs = mi.wait_for_jobs([r["run_id"] for r in with_summary], timeout=120)
        listed = {j["train_id"] for j in jobs}
        assert {f"./{r['run_id']}" for r in with_summary} <= listed
        for rec in with_summary:
            job = next(j for j in jobs if j["train_id"] == f"./{rec['run_id']}")
            tags = set((job.get("plugins") or {}).get("scalar", []))
            assert {"loss/scalar", "step_time_s/scalar", "throughput/scalar"} <= tags, tags
            served = {int(m["step"]): m["value"] for m in scalar_values(port, job["train_id"], "loss/scalar")}
            steps = store.read_table(rec["run_id"], "workload_steps")
            rank0 = steps[steps["rank"] == 0].set_index("step")["loss"]
            common = sorted(set(served) & set(int(s) for s in rank0.index))
            assert len(common) >= len(rank0) - 1, (sorted(served), list(rank0.index))
            for s in common:
                assert served[s] == pytest.approx(float(rank0[s]), rel=1e-5, abs=1e-6)
    assert not _listening(port), "MindInsight still listening after stop"


@pytest.mark.msrun
def test_cli_list_and_bad_input(sweep_store, mi_exe, tmp_path):
    port = _free_port()
    r = run_perfbench(
        "mindinsight", "--results", sweep_store, "--port", port, "--list", "--json", timeout=600, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["missing"] == [] and doc["url"] == f"http://127.0.0.1:{port}/"
    ok = [x["run_id"] for x in Store(sweep_store, create=False).list_runs() if x["status"] == "ok"]
    assert {f"./{i}" for i in ok} <= {j["train_id"] for j in doc["train_jobs"]}
    assert not _listening(port)
    r = run_perfbench("mindinsight", "--results", tmp_path / "missing", "--port", port, "--list", check=False)
    assert r.returncode == 2 and "no results at" in r.stderr
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    r = run_perfbench(
        "mindinsight", "--results", tmp_path / "empty", "--port", port, "--list", check=False, timeout=600
    )
    assert r.returncode == 2 and "no MindSpore summary files" in r.stderr and "Traceback" not in r.stderr
    assert not _listening(port)


@pytest.mark.msrun
def test_summary_view_does_not_touch_the_results(sweep_store, tmp_path, monkeypatch):
    from perfbench.run.mindinsight import build_summary_view

    monkeypatch.setenv("PERFBENCH_CACHE", str(tmp_path / "cache"))
    before = sorted(p.relative_to(sweep_store) for p in sweep_store.rglob("*"))
    base, dirs = build_summary_view(Store(sweep_store, create=False))
    assert sorted(p.relative_to(sweep_store) for p in sweep_store.rglob("*")) == before
    assert base.is_relative_to(tmp_path / "cache")
    assert dirs, "no summary folder in the view"
    for name, src in dirs.items():
        files = list(src.iterdir())
        assert files, f"{src} is empty"
        for f in files:
            linked = base / name / f.name
            assert linked.read_bytes() == f.read_bytes() and not linked.is_symlink()
