"""Which rank a failed torchrun run blames (perfbench.run.failures.dead_worker), on hand-written torchrun summaries
and ranks' final metas."""

from __future__ import annotations

import json
import os

from perfbench.run.failures import dead_worker

# torchrun's summary, as torch.distributed.elastic prints it: the root is the failure with the smallest timestamp in
# whole seconds, the lowest rank on a tie, so rank 0 (failed in its collective after rank 1 raised) is named here
SUMMARY = """
Failures:
[1]:
  time      : 2026-11-27_16:27:30
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 2002)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-27_16:27:30
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 2001)
"""


def _meta(metrics, rank: int, pid: int, exit_status, ended_ns: int) -> None:
    f = metrics / f"rank{rank}.meta.json"
    f.write_text(json.dumps({"rank": rank, "pid": pid, "exit_status": exit_status}))
    os.utime(f, ns=(ended_ns, ended_ns))


def _dirs(tmp_path):
    logs, metrics = tmp_path / "logs", tmp_path / "metrics"
    logs.mkdir()
    metrics.mkdir()
    (logs / "torchrun.out").write_text(SUMMARY)
    return logs, metrics


def test_the_rank_that_raised_first_is_blamed_not_torchruns_tie(tmp_path):
    logs, metrics = _dirs(tmp_path)
    t = 1_795_793_250_000_000_000
    _meta(metrics, 1, 2002, 1, t)  # raised first
    _meta(metrics, 0, 2001, 1, t + 40_000_000)  # 40 ms later: its collective's peer was gone
    died = dead_worker(logs, {}, metrics, "torchrun.out")
    assert died == {"pid": 2002, "code": 1, "how": "exited with code 1", "rank": 1}


def test_torchruns_root_stands_when_it_raised_first_or_wrote_no_final_meta(tmp_path):
    logs, metrics = _dirs(tmp_path)
    t = 1_795_793_250_000_000_000
    _meta(metrics, 0, 2001, 1, t)
    _meta(metrics, 1, 2002, 1, t + 40_000_000)
    assert dead_worker(logs, {}, metrics, "torchrun.out")["rank"] == 0
    # rank 0 killed (no final meta with its exit status), rank 1 failed after it in Python: torchrun's root stands
    _meta(metrics, 0, 2001, None, t)
    assert dead_worker(logs, {}, metrics, "torchrun.out") == {
        "pid": 2001,
        "code": 1,
        "how": "exited with code 1",
        "rank": 0,
    }


def test_one_node_of_several_blames_only_a_rank_its_own_torchrun_ran(tmp_path):
    """Two nodes, one rank each (Slurm): the metrics folder holds both ranks' metas, node 0's torchrun names rank 0
    alone. Rank 1 (node 1's) raised first, yet node 0's own account is its rank 0; node 1's account blames rank 1."""
    logs, metrics = tmp_path / "logs", tmp_path / "metrics"
    logs.mkdir()
    metrics.mkdir()
    node0 = (
        SUMMARY.split("Root Cause")[0]
        .replace("[1]:", "[0]:")
        .replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)")
    )
    node0 = node0.replace("exitcode  : 1 (pid: 2002)", "exitcode  : 1 (pid: 2001)")
    node0 += (
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 2001)\n"
    )
    (logs / "node0.out").write_text(node0)
    t = 1_795_793_250_000_000_000
    _meta(metrics, 1, 2002, 1, t)  # raised first, on node 1
    _meta(metrics, 0, 2001, 1, t + 40_000_000)
    assert dead_worker(logs, {}, metrics, "node0.out") == {
        "pid": 2001,
        "code": 1,
        "how": "exited with code 1",
        "rank": 0,
    }
    node1 = "Failures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
    node1 += "  rank      : 1 (local_rank: 0)\n  exitcode  : 1 (pid: 2002)\n"
    (logs / "node1.out").write_text(node1)
    assert dead_worker(logs, {}, metrics, "node1.out")["rank"] == 1
