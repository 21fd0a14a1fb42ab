"""The step records' batched writes (perfbench.capture.writer.StepLog) and the per-step memory sample: what is in
the file when (the first step at once, the rest by the next flush, everything at the end or at exit), what a forked
child does with its parent's kept lines (nothing), and what the sampler reads (the OS's resident set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from perfbench.capture import writer
from perfbench.capture.recorder import Recorder
from tests.support import ROOT


def _lines(path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def _recorder(tmp_path) -> Recorder:
    return Recorder({"run_id": "r", "world_size": 1, "output_dir": str(tmp_path), "train": {}}, rank=0)


def test_the_first_step_is_written_at_once_the_rest_by_the_next_flush(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "FLUSH_S", 3600.0)  # no timed flush during the test
    rec = _recorder(tmp_path)
    steps = tmp_path / "metrics" / "rank0.steps.jsonl"
    for i in range(4):
        rec.begin()
        rec.end(samples=2, loss=float(i))
    # step 0 is in the file with the first meta (the launcher sees the run's first finished step); 1-3 are kept
    assert [r["step"] for r in _lines(steps)] == [0]
    meta = json.loads((tmp_path / "metrics" / "rank0.meta.json").read_text())
    assert meta["recorded_steps"] == 1
    rec.flush()
    assert [r["step"] for r in _lines(steps)] == [0, 1, 2, 3]
    rec.begin()
    rec.end(samples=2, loss=4.0)
    rec.finish(0)  # the final meta comes after every line
    assert [r["loss"] for r in _lines(steps)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert json.loads((tmp_path / "metrics" / "rank0.meta.json").read_text())["recorded_steps"] == 5


def test_kept_lines_reach_the_file_without_a_further_step(tmp_path, monkeypatch):
    # a script that stops making steps (a hang, a long evaluation) still has its finished steps in the file
    monkeypatch.setattr(writer, "FLUSH_S", 0.05)
    rec = _recorder(tmp_path)
    for _ in range(3):
        rec.begin()
        rec.end(samples=1)
    steps = tmp_path / "metrics" / "rank0.steps.jsonl"
    deadline = time.time() + 30
    while len(_lines(steps)) < 3 and time.time() < deadline:
        time.sleep(0.05)
    assert [r["step"] for r in _lines(steps)] == [0, 1, 2]
    rec.finish(0)


def test_a_script_that_exits_without_finishing_leaves_every_line(tmp_path):
    code = (
        "from perfbench.capture import writer\n"
        "writer.FLUSH_S = 3600.0\n"
        "from perfbench.capture.recorder import Recorder\n"
        f"rec = Recorder({{'run_id': 'r', 'world_size': 1, 'output_dir': {str(tmp_path)!r}, 'train': {{}}}}, rank=0)\n"
        "for i in range(5):\n"
        "    rec.begin(); rec.end(samples=1)\n"
        "raise SystemExit(3)\n"  # no finish(): the lines kept since step 0 are written at the interpreter's exit
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert [x["step"] for x in _lines(tmp_path / "metrics" / "rank0.steps.jsonl")] == [0, 1, 2, 3, 4]


def test_a_forked_child_does_not_write_its_parents_kept_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "FLUSH_S", 3600.0)
    rec = _recorder(tmp_path)
    for _ in range(3):
        rec.begin()
        rec.end(samples=1)
    pid = os.fork()
    if pid == 0:  # a data-loader worker, say: it ends through the exit handlers with the parent's lines in memory
        try:
            writer._flush_open_logs()
            rec.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    steps = tmp_path / "metrics" / "rank0.steps.jsonl"
    assert [r["step"] for r in _lines(steps)] == [0]
    rec.finish(0)
    assert [r["step"] for r in _lines(steps)] == [0, 1, 2]


def test_the_memory_sampler_reads_the_resident_set_each_time():
    sampler = writer.MemorySampler()
    before = sampler.sample()
    block = bytearray(64 * 2**20)
    block[:: os.sysconf("SC_PAGE_SIZE")] = b"x" * len(block[:: os.sysconf("SC_PAGE_SIZE")])  # touch every page
    after = sampler.sample()
    assert set(after) == set(writer.memory_sample()) == {"max_rss_bytes", "rss_bytes"}
    assert after["rss_bytes"] - before["rss_bytes"] >= 60 * 2**20  # the 64 MiB just touched
    assert after["max_rss_bytes"] >= after["rss_bytes"] - 2**20
    del block
    sampler.close()


def test_a_step_ending_within_the_sampling_interval_carries_the_last_memory_sample(tmp_path, monkeypatch):
    from perfbench.capture import recorder as recorder_mod

    monkeypatch.setattr(recorder_mod, "MEMORY_EVERY_S", 3600.0)
    rec = _recorder(tmp_path)
    rec.begin()
    rec.end(samples=1)
    block = bytearray(64 * 2**20)
    block[:: os.sysconf("SC_PAGE_SIZE")] = b"x" * len(block[:: os.sysconf("SC_PAGE_SIZE")])
    rec.begin()
    rec.end(samples=1)  # within the interval: step 0's sample again, not the 64 MiB grown since
    monkeypatch.setattr(recorder_mod, "MEMORY_EVERY_S", 0.0)
    rec.begin()
    rec.end(samples=1)  # sampled
    rec.finish(0)
    s0, s1, s2 = _lines(tmp_path / "metrics" / "rank0.steps.jsonl")
    assert s1["rss_bytes"] == s0["rss_bytes"] and s1["max_rss_bytes"] == s0["max_rss_bytes"]
    assert s2["rss_bytes"] - s0["rss_bytes"] >= 60 * 2**20
    del block


def test_framework_scalars_are_written_as_numbers(tmp_path):
    import numpy as np

    rec = _recorder(tmp_path)
    rec.begin()
    rec.end(samples=np.int64(4), loss=np.float32(0.5), tokens=np.array([1, 2]))
    rec.finish(0)
    (s,) = _lines(tmp_path / "metrics" / "rank0.steps.jsonl")
    assert s["samples"] == 4 and s["loss"] == 0.5 and s["tokens"] == [1, 2]


def test_a_kept_steps_line_is_what_json_writes_for_its_record():
    # the writer's thread formats a plain step's line itself; the expected text is the standard library's json.dumps
    # of the same record (step_record + capture_s + extra, the recorder's key order)
    import math

    import numpy as np

    mem = {"max_rss_bytes": 412_345_344, "rss_bytes": 401_234_944}
    cases = [
        (0, 0, 1764250000.123456, 1764250000.126789, 64, 2.3025851249694824, False, 0.0033149999, mem, None, {}),
        (3, 17, 1.0, 1.5, None, None, True, 0.0, None, None, {}),
        (1, 2, 1.0, 2.0, 8, -0.0, False, 1e-9, {"max_rss_bytes": None, "rss_bytes": 4096}, None, {}),
        (1, 3, 1.0, 2.0, 8, 0.25, False, 1e-9, {"rss_bytes": 4096, "max_rss_bytes": 8192}, None, {}),  # its own order
        (0, 5, 1.0, 2.0, 8, math.nan, False, 0.5, mem, None, {}),  # NaN, as json writes it
        (0, 6, 1.0, 2.0, 8, math.inf, False, 0.5, None, None, {}),
        (0, 7, 1.0, 2.0, np.int64(4), np.float32(0.5), False, 0.5, mem, 0.0012, {"tokens": np.array([1, 2])}),
        (0, 8, 1.0, 2.0, True, 1.0, True, 0.5, mem, None, {"comm": 3, "samples": 9}),  # an extra overrides in place
    ]
    for rank, step, start, end, samples, loss, profiled, cpu_s, m, capture_s, extra in cases:
        rec = writer.step_record(rank, step, start, end, samples, loss, profiled, cpu_s, m)
        if capture_s is not None:
            rec["capture_s"] = capture_s
        rec.update(extra)
        expected = json.dumps(rec, default=writer._plain) + "\n"
        line = writer.step_line(rank, step, start, end, samples, loss, profiled, cpu_s, m, capture_s, extra)
        assert line == expected
    # and one written out by hand: the contract's key order (STEP_KEYS, cpu_s, the memory sample)
    assert writer.step_line(*cases[1]) == (
        '{"rank": 3, "step": 17, "start_ts": 1.0, "end_ts": 1.5, "step_time_s": 0.5, "samples": null, "loss": null, '
        '"profiled": true, "cpu_s": 0.0}\n'
    )
