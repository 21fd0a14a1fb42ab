"""Multi-node msrun without a scheduler: two node ranks of one run on this machine, each started by
perfbench's launcher with `launch.nodes: 2`, `node_rank` 0 / 1 and node 0's address as master, both
writing into one store's run folder; the ingested run has both ranks.

Node 1 runs in a network namespace with an address of its own (tests/local_slurm.Network): msrun starts
its scheduler on every node whose addresses include --master_addr, so two node ranks that share
127.0.0.1 would each start one (the second fails to bind the master port)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from perfbench.run.config import parse_config
from perfbench.run.ingest import ingest_run
from perfbench.run.launcher import launch, threads_per_rank, write_json
from perfbench.store import Store
from tests.support import ROOT, free_port
from tests.local_slurm import Network
from tests.integration.test_launcher_failures import SMALL, leftovers

pytestmark = pytest.mark.msrun

NODE = """
import json, sys
from pathlib import Path
from perfbench.run.launcher import launch
rc_path, launch_cfg = Path(sys.argv[1]), json.loads(sys.argv[2])
res = launch(rc_path, json.loads(rc_path.read_text()), launch_cfg)
print(json.dumps({"status": res.status, "reason": res.reason, "command": res.command}))
"""


@pytest.fixture
def network():
    import os
    import shutil

    if os.geteuid() != 0 or shutil.which("nsenter") is None:
        pytest.skip("a second host address needs a network namespace: root and nsenter")
    net = Network(hosts=1).up()
    yield net
    net.down()


def test_two_msrun_node_ranks_make_one_run_with_both_ranks(tmp_path, network):
    cfg = parse_config(
        dict(
            SMALL,
            name="multinode",
            sweep={"world_size": [2]},
            profile={"enabled": True, "steps": 1},
            launch={"nodes": 2, "timeout_s": 300, "stall_timeout_s": 120},
        )
    )
    (plan,) = cfg.plan("multinode-test")
    store = Store(tmp_path / "results")
    rc = dict(plan.run_config, output_dir=str(store.artifacts_dir(plan.run_id)), threads_per_rank=threads_per_rank(1))
    rc_path = store.artifacts_dir(plan.run_id) / "run_config.json"
    write_json(rc_path, rc)
    # node 0 on this host's bridge address (the master), node 1 in its namespace
    common = {**cfg.launch, "master_addr": network.gateway, "master_port": free_port()}
    node1 = subprocess.Popen(
        [*network.enter(0), sys.executable, "-c", NODE, str(rc_path), json.dumps({**common, "node_rank": 1})],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    node0: dict = {}
    t = threading.Thread(target=lambda: node0.update(res=launch(rc_path, rc, {**common, "node_rank": 0})))
    t.start()
    try:
        out, err = node1.communicate(timeout=400)
    finally:
        if node1.poll() is None:
            node1.kill()
        t.join(400)
    n1 = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"status": "no output", "reason": err[-2000:]}
    assert node0["res"].status == "ok", node0["res"].reason
    assert n1["status"] == "ok", n1["reason"]
    assert "--node_rank=0" in node0["res"].command and "--node_rank=1" in n1["command"]
    assert "--worker_num=2" in n1["command"] and "--local_worker_num=1" in n1["command"]

    metrics, warnings = ingest_run(store, plan.run_id, rc)
    store.write_run(
        {"run_id": plan.run_id, "status": "ok", "settings": plan.settings, "config": rc, "metrics": metrics}
    )
    steps = Store(tmp_path / "results").read_table(plan.run_id, "workload_steps")
    assert steps.groupby("rank")["step"].count().to_dict() == {0: 6, 1: 6}  # SMALL: train.steps 6 on each rank
    assert metrics["collectives_per_step"] > 0  # the two ranks all-reduced with each other across the nodes
    logs = store.artifacts_dir(plan.run_id) / "logs"
    assert "Start scheduler process" in (logs / "msrun-node0.out").read_text()
    assert "Start scheduler process" not in (logs / "msrun-node1.out").read_text()
    assert leftovers(tmp_path / "results") == []
