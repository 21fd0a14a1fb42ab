"""ResNet workload and runner: real msrun runs of a tiny ResNet (bottleneck layout 1-1-1-1, width 8, 16x16).

Also holds the shared msrun helper (`resnet_runs` session fixture) used by test_fusion.py and
test_compression.py, so each configuration is launched once per session.
"""

from __future__ import annotations

import copy
import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from perfbench.run import launcher
from tests.support import background_launch, kill_processes, session_processes

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "workloads" / "entry.py"
PY = sys.executable

TINY_MODEL = {"image_size": 16, "num_classes": 10, "width": 8, "layers": [1, 1, 1, 1]}
MID_MB = 0.1  # tiny model: 53 gradient tensors, 0.52 MB in fp32

BASE = {
    "run_id": "t",
    "workload": "resnet50",
    "world_size": 2,
    "repeat": 0,
    "output_dir": "",
    "threads_per_rank": 1,
    "model": TINY_MODEL,
    "train": {
        "batch_size": 8,
        "steps": 16,
        "warmup_steps": 1,
        "seed": 0,
        "lr": 0.05,
        "momentum": 0.9,
        "mode": "graph",
        "data": "synthetic",
    },
    "profile": {"enabled": True, "steps": 2},
    "parallel": {
        "grad_compression": "none",
        "compression_ratio": 0.01,
        "comm_fusion": 0,
        "fusion_impl": "perfbench",
        "pipeline_stages": 1,
        "micro_batches": 1,
        "pipeline_schedule": "1f1b",
    },
    "inject": {"crash_rank": None, "crash_step": None, "hang_rank": None, "hang_step": None, "delay_ms": 0},
}

# name -> overrides (msrun's master port is chosen free at launch time)
SPECS = {
    "pb0": ({"parallel": {"comm_fusion": 0}},),
    "pbmid": ({"parallel": {"comm_fusion": MID_MB}},),
    "pball": ({"parallel": {"comm_fusion": "all"}},),
    "fp16": ({"parallel": {"comm_fusion": "all", "grad_compression": "fp16"}},),
    "psgd": ({"parallel": {"comm_fusion": "all", "grad_compression": "powersgd", "compression_ratio": 0.1}},),
    "topk": ({"parallel": {"comm_fusion": "all", "grad_compression": "topk", "compression_ratio": 0.1}},),
    "msall": ({"parallel": {"fusion_impl": "mindspore", "comm_fusion": "all"}},),
}


def make_config(out: Path, name: str, overrides: dict) -> dict:
    cfg = copy.deepcopy(BASE)
    for k, v in overrides.items():
        if isinstance(v, dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    cfg["run_id"] = name
    cfg["output_dir"] = str(out / name / "artifacts")
    return cfg


def launch(out: Path, name: str, overrides: dict, timeout_s: float = 240):
    cfg = make_config(out, name, overrides)
    art = Path(cfg["output_dir"])
    art.mkdir(parents=True, exist_ok=True)
    path = art / "run_config.json"
    path.write_text(json.dumps(cfg, indent=1))
    res = launcher.launch(
        path,
        cfg,
        {"master_port": "auto", "bind_core": "auto", "timeout_s": timeout_s, "stall_timeout_s": 300},
        # end the run once every rank has written all its steps and its final meta (its last write, after the
        # profiler and summary output), as `tune` and `advise --try` do, instead of waiting 5-10 s per run for
        # MindSpore's cluster teardown; `perfbench sweep` still waits for it (test_launcher_failures, e2e)
        skip_teardown=True,
    )
    return Run(name, cfg, art, res)


class Run:
    def __init__(self, name, cfg, art: Path, res):
        self.name, self.cfg, self.art, self.res = name, cfg, art, res

    def steps(self, rank: int) -> list[dict]:
        p = self.art / "metrics" / f"rank{rank}.steps.jsonl"
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    def meta(self, rank: int) -> dict:
        return json.loads((self.art / "metrics" / f"rank{rank}.meta.json").read_text())

    def profile_dirs(self) -> list[Path]:
        return sorted((self.art / "profile").glob("*_ascend_ms"))

    def profile_dir(self, rank: int) -> Path:
        """The profiler folder of `rank` (matched through meta.json's pid)."""
        pid = self.meta(rank)["pid"]
        found = [d for d in self.profile_dirs() if f"_{pid}_" in d.name]
        assert len(found) == 1, (rank, pid, self.profile_dirs())
        return found[0]

    def cpu_ops(self, rank: int) -> list[dict]:
        tv = json.loads((self.profile_dir(rank) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
        procs = {e["pid"]: e["args"]["name"] for e in tv if e.get("ph") == "M" and e.get("name") == "process_name"}
        return [e for e in tv if e.get("ph") == "X" and procs.get(e["pid"]) == "CPU OP"]

    def allreduces_per_step(self, rank: int) -> float:
        n = sum(1 for e in self.cpu_ops(rank) if e["name"].rsplit("/", 1)[-1].startswith("AllReduce"))
        prof = [s for s in self.steps(rank) if s["profiled"]]
        return n / len(prof)

    def allreduce_numels(self, rank: int) -> list[int]:
        """Element count of every distinct AllReduce op in the profile (cpu_framework_{rank}.txt input shapes)."""
        txt = (self.profile_dir(rank) / "FRAMEWORK" / f"cpu_framework_{rank}.txt").read_text()
        sizes = {}
        for line in txt.splitlines():
            parts = line.rstrip(";").split(";")
            if parts[0] == "AllReduce":
                total = 0  # a fused AllReduce (MindSpore comm_fusion) has one input per gradient
                for inp in parts[3:]:
                    n = 1
                    for d in re.findall(r"\d+", inp.split(":", 1)[1]):
                        n *= int(d)
                    total += n
                sizes[parts[1]] = total
        return sorted(sizes.values())


class Runs:
    """Launch SPECS once per session. `prefetch` queues runs for two background workers (two msruns at a time:
    start-up is mostly latency; more would oversubscribe the 2 cores until collectives time out)."""

    WORKERS = 2

    def __init__(self, out: Path):
        self.out = out
        self._runs: dict[str, Run] = {}
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._workers: list[threading.Thread] = []

    def _claim(self, name):
        with self._lock:
            if name in self._events:
                return self._events[name], False
            ev = self._events[name] = threading.Event()
            return ev, True

    def _do(self, name, ev):
        try:
            (overrides,) = SPECS[name]
            self._runs[name] = launch(self.out, name, overrides)
        finally:
            ev.set()

    def _work(self):
        while True:
            item = self._queue.get()
            if item is None:  # close(): no more work
                return
            self._do(*item)

    def prefetch(self, *names):
        if not self._workers:
            for _ in range(self.WORKERS):
                t = threading.Thread(target=self._work, daemon=True)
                t.start()
                self._workers.append(t)
        for n in names:
            ev, mine = self._claim(n)
            if mine:
                background_launch(n)  # its msrun may outlive the test that queued it; close() ends it
                self._queue.put((n, ev))

    def close(self):
        """End of session: drop queued runs, end the ones under way (their msrun trees, by the launcher's
        tag) and wait for the workers, so no msrun outlives the session (daemon threads would die at exit
        without their launcher's cleanup and leave orphaned msrun trees behind)."""
        while True:
            try:
                _, ev = self._queue.get_nowait()
                ev.set()
            except queue.Empty:
                break
        for _ in self._workers:
            self._queue.put(None)
        under_way = [n for n, ev in self._events.items() if not ev.is_set()]
        kill_processes([p for p in session_processes() if any((_tag(p) or "").startswith(f"{n}-") for n in under_way)])
        for t in self._workers:
            t.join(60)
        assert not any(t.is_alive() for t in self._workers), "a prefetch worker did not stop"

    def get(self, name: str) -> Run:
        ev, mine = self._claim(name)
        if mine:
            self._do(name, ev)
        assert ev.wait(900), f"{name}: not finished after 900 s"
        run = self._runs.get(name)
        assert run is not None, f"{name}: launch raised (see the log above)"
        assert run.res.status == "ok", f"{name}: {run.res.reason}\n{run.res.log_tail}"
        return run


_RUNS: Runs | None = None


@pytest.fixture(scope="session")
def resnet_runs(tmp_path_factory):
    # imported by test_fusion / test_compression: each import registers its own fixture, so share one object
    global _RUNS
    if _RUNS is None:
        _RUNS = Runs(tmp_path_factory.mktemp("resnet_runs"))
        owner = True
    else:
        owner = False
    yield _RUNS
    if owner:
        _RUNS.close()
        _RUNS = None


def _tag(p):
    try:
        return p.environ().get(launcher.TAG_VAR)
    except Exception:  # gone or not ours to read
        return None


def losses(run: Run, rank: int) -> list[float]:
    return [s["loss"] for s in run.steps(rank)]


# ---------------------------------------------------------------------------------------------------------------
# without msrun: bad input gives a clear error and no traceback


def _entry(cfg_path: Path, timeout=120):
    env = dict(os.environ)
    env.pop("MS_ROLE", None)
    return subprocess.run(
        [PY, str(ENTRY), "--config", str(cfg_path)], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_entry_missing_and_corrupt_config(tmp_path):
    r = _entry(tmp_path / "nope.json")
    assert r.returncode == 2 and "run config not found" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"run_id": "x", ')
    r = _entry(bad)
    assert r.returncode == 2 and "bad.json" in r.stderr and "not valid JSON" in r.stderr
    assert "Traceback" not in r.stderr
    cfg = make_config(tmp_path, "x", {})
    del cfg["inject"]
    bad.write_text(json.dumps(cfg))
    r = _entry(bad)
    assert r.returncode == 2 and "missing key 'inject'" in r.stderr and "Traceback" not in r.stderr


def test_entry_bad_parallel_setting_is_a_config_error(tmp_path):
    cfg = make_config(tmp_path, "badpar", {"world_size": 1, "parallel": {"grad_compression": "zip"}})
    p = tmp_path / "run_config.json"
    p.write_text(json.dumps(cfg))
    r = _entry(p)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "parallel.grad_compression" in r.stderr and "'zip'" in r.stderr
    assert "Traceback" not in r.stderr


# ---------------------------------------------------------------------------------------------------------------
# real msrun


@pytest.mark.msrun
@pytest.mark.timeout(420)
def test_two_ranks_write_the_contract_files(resnet_runs):
    # every 2-rank run the msrun tests of this file, test_fusion and test_compression use, in the order they need them
    resnet_runs.prefetch("pball", "fp16", "pb0", "pbmid", "msall", "psgd", "topk")
    run = resnet_runs.get("pball")
    cfg = run.cfg
    steps_n, warm, prof_n = cfg["train"]["steps"], cfg["train"]["warmup_steps"], cfg["profile"]["steps"]
    for rank in (0, 1):
        steps = run.steps(rank)
        assert [s["step"] for s in steps] == list(range(steps_n))
        assert all(s["rank"] == rank and s["samples"] == cfg["train"]["batch_size"] for s in steps)
        assert [s["step"] for s in steps if s["profiled"]] == list(range(warm, warm + prof_n))
        for s in steps:
            assert s["end_ts"] > s["start_ts"] and abs(s["step_time_s"] - (s["end_ts"] - s["start_ts"])) < 1e-6
        for a, b in zip(steps, steps[1:]):
            assert b["start_ts"] >= a["end_ts"]
        meta = run.meta(rank)
        for k in (
            "rank",
            "world_size",
            "threads",
            "pid",
            "mindspore_version",
            "mode",
            "params",
            "comm_backend",
            "fusion_impl_used",
            "grad_compression",
            "bytes_per_step_uncompressed",
            "expert_comm",
            "clock",
        ):
            assert k in meta, k
        assert meta["rank"] == rank and meta["world_size"] == 2 and meta["finished"] is True
        assert meta["threads"] >= 1 and meta["fusion_impl_used"] == "perfbench"
        # per-rank data: the two ranks see different batches, so their losses differ
    assert losses(run, 0)[warm:] != losses(run, 1)[warm:]
    # one profiler folder per rank, holding the profiled window only, on the same clock as start_ts/end_ts
    assert len(run.profile_dirs()) == 2
    for rank in (0, 1):
        ops = run.cpu_ops(rank)
        assert ops, "no CPU ops in the profile"
        prof = [s for s in run.steps(rank) if s["profiled"]]
        lo, hi = prof[0]["start_ts"] * 1e6, prof[-1]["end_ts"] * 1e6
        ts = [float(e["ts"]) for e in ops]
        assert min(ts) >= lo - 1e3 and max(ts) <= hi + 1e3, (min(ts) - lo, hi - max(ts))
        # each profiled step holds ops: the profile covers the whole window
        for s in prof:
            assert any(s["start_ts"] * 1e6 <= t <= s["end_ts"] * 1e6 for t in ts)
    # summary (rank 0 only): a MindSpore summary file that holds our three scalar tags
    files = list((run.art / "summary").glob("*summary*"))
    assert len(files) == 1, files
    blob = files[0].read_bytes()
    for tag in (b"loss", b"step_time_s", b"throughput"):
        assert tag in blob


@pytest.mark.msrun
@pytest.mark.timeout(300)
def test_inject_delay_and_crash_single_rank(tmp_path):
    over = {
        "world_size": 1,
        "train": {"steps": 8, "warmup_steps": 1},
        "profile": {"enabled": False, "steps": 0},
        "inject": {"crash_rank": 0, "crash_step": 4, "hang_rank": None, "hang_step": None, "delay_ms": 300},
    }
    run = launch(tmp_path, "crash", over, timeout_s=200)
    assert run.res.status == "failed"
    steps = run.steps(0)
    assert [s["step"] for s in steps] == [0, 1, 2, 3]  # every finished step is kept, step 4 never ran
    assert all(s["step_time_s"] >= 0.3 for s in steps)  # delay_ms is inside the timed step
    assert all(not s["profiled"] for s in steps)  # profiling is off: no step profiled, no profiler output
    assert not (run.art / "profile").exists() or not list((run.art / "profile").glob("*_ascend_ms"))
    log = (run.art / "logs" / "worker_0.log").read_text(errors="replace")
    assert "crashing at step 4 (exit 3)" in log


def test_image_folder_data_reads_classes_from_folders(tmp_path):
    from PIL import Image

    import numpy as np

    from perfbench.errors import ConfigError
    from workloads.data import ImageFolder, make_image_data

    rng = np.random.default_rng(0)
    for cls, lo, hi in (("a_dark", 0, 60), ("b_bright", 190, 255)):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(6):
            px = rng.integers(lo, hi, size=(20, 24, 3), dtype=np.uint8)
            Image.fromarray(px).save(tmp_path / "imgs" / cls / f"{i}.png")
    data = ImageFolder(
        str(tmp_path / "imgs"), batch_size=4, image_size=16, num_classes=10, seed=0, rank=0, world_size=1
    )
    seen = set()
    for step in range(6):  # 12 images, batches of 4: cycles through epochs
        x, y = data.batch(step)
        assert x.shape == (4, 3, 16, 16) and x.dtype == np.float32 and y.dtype == np.int32
        for img, label in zip(x, y):
            # class 0 is the dark folder, class 1 the bright one (sorted folder names)
            assert (img.mean() < 0) == (label == 0), (img.mean(), label)
            seen.add(int(label))
    assert seen == {0, 1}
    with pytest.raises(ConfigError, match="does not exist"):
        make_image_data(
            {"data": str(tmp_path / "missing"), "batch_size": 4, "seed": 0}, {"image_size": 16, "num_classes": 10}, 0, 1
        )
    with pytest.raises(ConfigError, match="classes but model.num_classes is 1"):
        ImageFolder(str(tmp_path / "imgs"), 4, 16, 1, 0, 0, 1)


def test_synthetic_data_is_deterministic_per_seed_rank_step():
    import numpy as np

    from workloads.data import SyntheticImages

    a = SyntheticImages(4, 8, 10, seed=1, rank=0)
    assert all(np.array_equal(u, v) for u, v in zip(a.batch(3), SyntheticImages(4, 8, 10, 1, 0).batch(3)))
    assert not np.array_equal(a.batch(3)[0], a.batch(4)[0])
    assert not np.array_equal(a.batch(3)[0], SyntheticImages(4, 8, 10, 1, 1).batch(3)[0])
    assert np.array_equal(a.prototypes, SyntheticImages(4, 8, 10, 1, 1).prototypes)  # same task on every rank
