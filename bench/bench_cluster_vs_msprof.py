"""Side-by-side: `msprof-analyze cluster` vs `perfbench analyze` on the same Ascend profiler data, up to 1,024 ranks.

Both run as fresh processes (interpreter start and imports included, as a user would run them), in
alternating order, `--repeats` times each: `msprof-analyze cluster -d DATA -m all -o OUT` and
`perfbench analyze DATA --results RES --json` (default `--kernels auto` and `--detail auto`: the profiler's step
trace is the breakdown; up to 8 ranks every rank's kernels (the cross-check) and memory records are read, above 8
ranks each rank's memory files are reduced to its peaks while read and the first and last rank's trace_view.json
give the collective sizes; default `--workers`). The report gives
medians of wall time, of CPU time (user + sys of the process and of its worker processes, which depends much
less on how loaded the shared machine is than wall time) and of peak memory: the largest sum of the RSS of the
process and all its descendants (worker processes included), sampled every 20 ms, and the ratios
msprof / perfbench. For perfbench also CPU and wall seconds per rank, and the machine's load average.

Data sets (made in a temp dir, never in the repo):
  b-level1   fixture set B level1: 2 ranks, torch_npu text export with communication data
  b-level2   fixture set B level2
  synth-N    N ranks made from set B level1's two real ranks (`make_synth`): data-parallel groups of 8 with
             their own group names and parallel_group_info, rank ids and group-local link numbers rewritten,
             one planted slow rank and one planted slow link (`planted`). perfbench's --json output must name
             exactly that rank as slow (group level) and that link as slow, or the benchmark fails.

Usage:
  .venv/bin/python bench/bench_cluster_vs_msprof.py [--sets b-level1,synth-16,synth-128,synth-1024] [--repeats 3]
      [--msprof-sets b-level1,synth-16,synth-128] [--workers N] [--baseline ../main]

--baseline DIR runs another checkout's `perfbench analyze` interleaved with this one's (what a change costs):
  .venv/bin/python bench/bench_cluster_vs_msprof.py --sets synth-128,synth-1024 --msprof-sets none --baseline ../main
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT.parent / "shared" / "fixtures" / "ascend" / "Ascend__msinsight" / "test" / "data" / "pytorch" / "text"
PY = Path(sys.executable)
MSPROF = PY.with_name("msprof-analyze")


#: synthetic clusters: data-parallel groups of this many ranks (set B level1's one group has 8 ranks)
DP = 8
#: the planted slow rank arrives this much later than its group at every collective (ms)
SLOW_RANK_DELAY_MS = 30.0
#: the planted slow link takes this many times longer for the same bytes (bandwidth / 4)
SLOW_LINK_FACTOR = 4.0


def planted(n: int) -> tuple[int, tuple[int, int]]:
    """(slow rank, (src, dst) of the slow link) planted in synth-n: in the middle of the cluster, in two
    different DP groups when there are several."""
    groups = max(1, n // DP)
    g_rank, g_link = groups // 2, (groups // 2 + 1) % groups
    return g_rank * DP + 3 % DP, (g_link * DP + 2 % DP, g_link * DP + 5 % DP)


def make_set(name: str, tmp: Path) -> Path:
    dst = tmp / name
    if name.startswith("b-level"):
        shutil.copytree(FIX / name.split("-", 1)[1], dst)
        return dst
    if name.startswith("synth-"):
        make_synth(int(name.split("-")[1]), dst)
        return dst
    if name.startswith("large-"):
        make_synth(int(name.split("-")[1]), dst, scale=LARGE)
        return dst
    raise SystemExit(f"unknown set {name}")


def _group_id(g: int) -> str:
    return str(17522688603477080000 + g)  # a number like the profiler's HCCL group names


#: the "large" variant: how many profiled steps each heavy file of a source rank is replicated over (its real
#: rows repeated with timestamps shifted by STEP_SHIFT_US per step): 1,004 x 20 = 20,080 memory records,
#: operator_memory.csv ~600 KB, npu_module_mem.csv ~830 KB, kernel_details.csv 191 x 160 = 30,560 kernels
#: (~10.6 MB) with step_trace_time.csv over the same 160 steps, trace_view.json ~11 MB
LARGE = {
    "memory_record.csv": 20,
    "operator_memory.csv": 20,
    "npu_module_mem.csv": 20,
    "kernel_details.csv": 160,
    "step_trace_time.csv": 160,
    "trace_view.json": 5,
}
#: one replicated step is this much later than the one before (set B level1's profile spans ~270 ms)
STEP_SHIFT_US = 300_000
#: columns (header names) of each CSV holding a timestamp (shifted) or the step number (counted up)
_TIME_COLUMNS = {
    "memory_record.csv": ("Timestamp(us)",),
    "operator_memory.csv": ("Allocation Time(us)", "Release Time(us)", "Active Release Time(us)"),
    "npu_module_mem.csv": ("Timestamp(us)",),
    "kernel_details.csv": ("Start Time(us)",),
    "step_trace_time.csv": (),
}
_STEP_COLUMNS = {"kernel_details.csv": "Step Id", "step_trace_time.csv": "Step"}


def _shift_cell(cell: str, shift: int) -> str:
    """A timestamp cell as the profiler writes it ("1736408883573957.920\\t"; empty when unknown) `shift` µs
    later, digits and trailing blanks kept (exact: decimal arithmetic)."""
    from decimal import Decimal

    text = cell.rstrip()
    if not text or not shift:
        return cell
    d = Decimal(text) + shift
    places = len(text.partition(".")[2])
    return f"{d:.{places}f}" + cell[len(text) :]


def scale_csv(src: Path, dst: Path, steps: int) -> None:
    """src's data rows written `steps` times to dst, copy k with its timestamps STEP_SHIFT_US x k later and its
    step number k higher (what `steps` profiled steps of the same job would look like)."""
    import csv

    with open(src, newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    header, data = rows[0], [r for r in rows[1:] if r]
    times = [i for i, h in enumerate(header) if h in _TIME_COLUMNS[src.name]]
    step_col = header.index(_STEP_COLUMNS[src.name]) if src.name in _STEP_COLUMNS else None
    with open(dst, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        for k in range(steps):
            for row in data:
                row = list(row)
                for i in times:
                    row[i] = _shift_cell(row[i], k * STEP_SHIFT_US)
                if step_col is not None and row[step_col].strip().isdigit():
                    row[step_col] = str(int(row[step_col]) + k)
                w.writerow(row)


def scale_trace(src: Path, dst: Path, steps: int) -> None:
    """trace_view.json's events `steps` times (metadata events once), copy k STEP_SHIFT_US x k later, its
    ProfilerStep#N named N + k and its flow ids made unique."""
    events = json.loads(src.read_text())
    out = [e for e in events if e.get("ph") == "M"]
    flows = max((int(e["id"]) for e in events if "id" in e and str(e["id"]).isdigit()), default=0) + 1
    for k in range(steps):
        for e in events:
            if e.get("ph") == "M":
                continue
            e = dict(e)
            if isinstance(e.get("ts"), str):
                e["ts"] = _shift_cell(e["ts"], k * STEP_SHIFT_US)
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
                e["name"] = f"ProfilerStep#{int(name[13:]) + k}"
            if "id" in e and str(e["id"]).isdigit():
                e["id"] = int(e["id"]) + k * flows
            out.append(e)
    dst.write_text(json.dumps(out))


def scale_rank(out_dir: Path, scale: dict[str, int]) -> None:
    """A source rank's ASCEND_PROFILER_OUTPUT/ with its heavy files replicated over more steps (`scale`)."""
    for name, steps in scale.items():
        f = out_dir / name
        if not f.exists() or steps <= 1:
            continue
        tmp = f.with_name(f.name + ".scaled")
        (scale_trace if name.endswith(".json") else scale_csv)(f, tmp, steps)
        tmp.replace(f)


def make_synth(n: int, dst: Path, scale: dict[str, int] | None = None) -> None:
    """n ranks from set B level1's two real ranks (both in one 8-rank allreduce group): rank r is local rank
    r % 8 of DP group r // 8 (profiler_info rank_id, profiler_metadata parallel_group_info, the group name in
    communication*.json, and the group-local rank numbers of its matrix rewritten: local ranks s and r % 8 swap,
    s = the source rank). Files that need no rewrite are hard links to one temp copy of each source rank.
    Planted (see `planted`): one slow rank (every other rank of its group waits SLOW_RANK_DELAY_MS longer at each
    collective: wait and elapse grow, as the profiler would record them) and one slow link (its transfers take
    SLOW_LINK_FACTOR times longer in the sender's matrix). `scale` (LARGE): the two source ranks' heavy files
    replicated over more steps first (`scale_rank`), so every rank has real-size files."""
    dst.mkdir(parents=True)
    src_dirs = []
    for s in (0, 1):
        c = dst / f".src{s}"
        shutil.copytree(FIX / "level1" / f"rank{s}_ascend_pt", c)
        os.chmod(c / "ASCEND_PROFILER_OUTPUT", 0o755)
        if scale:
            scale_rank(c / "ASCEND_PROFILER_OUTPUT", scale)
        src_dirs.append(c)
    comm = [json.loads((d / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text()) for d in src_dirs]
    matrix = [json.loads((d / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").read_text()) for d in src_dirs]
    info = [json.loads((d / f"profiler_info_{s}.json").read_text()) for s, d in enumerate(src_dirs)]
    slow_rank, slow_link = planted(n)
    rewritten = ("communication.json", "communication_matrix.json")
    for r in range(n):
        g, local = divmod(r, DP)
        s = local % 2
        size = min(DP, n - g * DP)
        perm = {s: local, local: s}
        d = dst / f"rank{r}_ascend_pt"
        out = d / "ASCEND_PROFILER_OUTPUT"
        out.mkdir(parents=True)
        for f in (src_dirs[s] / "ASCEND_PROFILER_OUTPUT").iterdir():
            if f.name not in rewritten:
                os.link(f, out / f.name)
        gid = _group_id(g)
        (d / f"profiler_info_{r}.json").write_text(json.dumps({**info[s], "rank_id": r}))
        (d / "profiler_metadata.json").write_text(
            json.dumps(
                {
                    "parallel_group_info": {
                        gid: {
                            "group_name": "dp",
                            "group_rank": local,
                            "global_ranks": list(range(g * DP, g * DP + size)),
                        }
                    }
                }
            )
        )
        delay = SLOW_RANK_DELAY_MS if (r // DP == slow_rank // DP and r != slow_rank) else 0.0
        c = {}
        for step, kinds in comm[s].items():
            c[step] = {
                kind: {_regroup(k, gid): _delayed(v, delay) for k, v in ops.items()} for kind, ops in kinds.items()
            }
        (out / "communication.json").write_text(json.dumps(c))
        m = {}
        for step, kinds in matrix[s].items():
            m[step] = {
                kind: {
                    _regroup(k, gid): {_relink(p, perm): _slowed(v, r, p, perm, g, slow_link) for p, v in links.items()}
                    for k, links in ops.items()
                }
                for kind, ops in kinds.items()
            }
        (out / "communication_matrix.json").write_text(json.dumps(m))
    for c in src_dirs:
        shutil.rmtree(c)


def _regroup(key: str, gid: str) -> str:
    name, at, _ = key.partition("@")
    return f"{name}@{gid}" if at else key


def _relink(pair: str, perm: dict) -> str:
    a, _, b = pair.partition("-")
    return f"{perm.get(int(a), int(a))}-{perm.get(int(b), int(b))}"


def _delayed(op: dict, delay: float) -> dict:
    if not delay or not isinstance(op, dict) or "Communication Time Info" not in op:
        return op
    t = dict(op["Communication Time Info"])
    t["Elapse Time(ms)"] += delay
    t["Wait Time(ms)"] += delay
    transit = t.get("Transit Time(ms)") or 0.0
    t["Wait Time Ratio"] = round(t["Wait Time(ms)"] / (t["Wait Time(ms)"] + transit), 4)
    return {**op, "Communication Time Info": t}


def _slowed(link: dict, r: int, pair: str, perm: dict, g: int, slow_link: tuple[int, int]) -> dict:
    a, _, b = _relink(pair, perm).partition("-")
    if (g * DP + int(a), g * DP + int(b)) != slow_link or r != slow_link[0] or not isinstance(link, dict):
        return link
    t = link.get("Transit Time(ms)") or 0.0
    return {
        **link,
        "Transit Time(ms)": t * SLOW_LINK_FACTOR,
        "Bandwidth(GB/s)": round((link.get("Bandwidth(GB/s)") or 0.0) / SLOW_LINK_FACTOR, 4),
    }


def timed(cmd: list[str], timeout: float = 1800, cwd: Path = ROOT) -> tuple[float, float, float, bytes]:
    """(wall s, CPU s of the process and all its waited-for descendants: user + sys, peak MB of the summed RSS
    of the process tree (sampled every 20 ms), stdout)."""
    import psutil

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    gnu = tempfile.NamedTemporaryFile(suffix=".time", delete=False)
    gnu.close()
    if GNU_TIME.exists():  # GNU time's max RSS (the largest single process of the tree) as a second figure
        cmd = [str(GNU_TIME), "-v", "-o", gnu.name, *cmd]
    t = time.perf_counter()
    peak = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=cwd)  # `-m perfbench`: the code of the checkout in cwd
        proc = psutil.Process(p.pid)
        status = None
        while status is None:
            try:
                tree = [proc] + proc.children(recursive=True)
                peak = max(peak, sum(_rss(q) for q in tree))
            except psutil.Error:
                pass
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                status = st
            elif time.perf_counter() - t > timeout:
                p.kill()
                raise SystemExit(f"timed out after {timeout} s: {' '.join(cmd)}")
            else:
                time.sleep(0.02)
        dt = time.perf_counter() - t
        rc = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read()
        if rc != 0:
            err.seek(0)
            raise SystemExit(f"failed ({rc}): {' '.join(cmd)}\n{stdout[-1500:]}\n{err.read()[-1500:]}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = max(peak, ru.ru_maxrss * 1024)
    LAST_GNU_RSS_MB[0] = _gnu_max_rss_mb(Path(gnu.name))
    os.unlink(gnu.name)
    return dt, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), peak / 2**20, stdout


GNU_TIME = Path("/usr/bin/time")
#: GNU time's "Maximum resident set size" of the last `timed` command (MB; None without GNU time)
LAST_GNU_RSS_MB: list = [None]


def _gnu_max_rss_mb(path: Path) -> float | None:
    try:
        for line in path.read_text().splitlines():
            if "Maximum resident set size" in line:
                return int(line.rsplit(":", 1)[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def _rss(q) -> int:
    try:
        return q.memory_info().rss
    except Exception:
        return 0


def check_planted(name: str, stdout: bytes) -> str:
    """For synth-N: perfbench's --json names the planted slow rank (and no other rank, at group level) and the
    planted slow link. Returns a one-line summary; exits non-zero otherwise."""
    if not name.startswith(("synth-", "large-")):
        return ""
    n = int(name.split("-")[1])
    if n < DP:  # fewer ranks than one DP group: nothing planted
        return ""
    doc = json.loads(stdout)
    rank, link = planted(n)
    slow = sorted({r["rank"] for r in doc["slow_ranks"] if r.get("slow") and r.get("scope") == "group"})
    links = sorted({(r["src"], r["dst"]) for r in doc["slow_links"] if r.get("slow") and r.get("kind") == "link"})
    if slow != [rank] or link not in links:
        raise SystemExit(
            f"{name}: planted slow rank {rank} / link {link} not found as the only ones: slow ranks "
            f"{slow}, slow links {links}"
        )
    return f"planted slow rank {rank} and slow link {link[0]}->{link[1]} found (slow links flagged: {len(links)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="b-level1,synth-16,synth-128,synth-1024")
    ap.add_argument(
        "--msprof-sets",
        default="b-level1,synth-16,synth-128",
        help="sets msprof-analyze also runs on (it takes minutes per run at 1,024 ranks)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="perfbench analyze --workers (default: its own)")
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of perfbench (e.g. ../main): its `perfbench analyze` (same interpreter, "
        "`-m perfbench` run in that folder) runs interleaved with this one on the same data, "
        "and the report gives this / baseline (e.g. what a change adds to analyze)",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="make the sets here and keep them (a set already there is reused) instead of in a temp dir",
    )
    ap.add_argument("--make-only", action="store_true", help="only make the sets (with --data-dir)")
    ap.add_argument(
        "--keep-results",
        type=Path,
        default=None,
        help="keep perfbench's store of each set's last run here (DIR/NAME), e.g. to time `perfbench show RUN "
        "--rank R`",
    )
    args = ap.parse_args()
    base_runs: dict[str, list] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="perfbench-cluster-vs-msprof-") as tmpd:
        tmp = Path(tmpd)
        for name in args.sets.split(","):
            if args.data_dir is not None:
                data = args.data_dir / name
                if not data.exists():
                    args.data_dir.mkdir(parents=True, exist_ok=True)
                    make_set(name, args.data_dir)
                if args.make_only:
                    print(f"{name}: {data}", flush=True)
                    continue
            else:
                data = make_set(name, tmp)
            with_ms = name in args.msprof_sets.split(",")
            ms, pb, loads, found = [], [], [], ""
            for i in range(args.repeats):
                out = tmp / f"msprof-out-{name}-{i}"
                res = tmp / f"pb-res-{name}-{i}"
                pcmd = [str(PY), "-m", "perfbench", "analyze", str(data), "--results", str(res), "--json"]
                if args.workers is not None:
                    pcmd += ["--workers", str(args.workers)]
                order = [("p", pcmd)]
                if args.baseline is not None:
                    order.append(
                        (
                            "b",
                            [
                                str(PY),
                                "-m",
                                "perfbench",
                                "analyze",
                                str(data),
                                "--results",
                                str(res) + "-base",
                                "--json",
                            ]
                            + (["--workers", str(args.workers)] if args.workers is not None else []),
                        )
                    )
                if with_ms:
                    order.append(("m", [str(MSPROF), "cluster", "-d", str(data), "-m", "all", "-o", str(out)]))
                if i % 2:
                    order.reverse()
                for who, cmd in order:
                    loads.append(os.getloadavg()[0])
                    got = timed(cmd, cwd=args.baseline.resolve() if who == "b" else ROOT)
                    if who == "b":
                        base_runs.setdefault(name, []).append(got[:3])
                        continue
                    (ms if who == "m" else pb).append((*got[:3], LAST_GNU_RSS_MB[0] or float("nan")))
                    if who == "p":
                        found = check_planted(name, got[3])
                shutil.rmtree(out, ignore_errors=True)
                if args.keep_results is not None and i == args.repeats - 1:
                    shutil.rmtree(args.keep_results / name, ignore_errors=True)
                    args.keep_results.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(res), args.keep_results / name)
                    print(f"{name}: perfbench's store kept in {args.keep_results / name}", flush=True)
                shutil.rmtree(res, ignore_errors=True)
                shutil.rmtree(str(res) + "-base", ignore_errors=True)
            med = [statistics.median(x[k] for x in pb) for k in range(4)]
            mmed = [statistics.median(x[k] for x in ms) for k in range(4)] if ms else None
            ranks = int(name.split("-")[1]) if name.startswith(("synth", "large")) else 2
            rows.append((name, ranks, mmed, med, min(loads), max(loads)))
            print(
                f"{name}: perfbench analyze wall {['%.2f' % x[0] for x in pb]} cpu {['%.2f' % x[1] for x in pb]} "
                f"peak MB {['%.0f' % x[2] for x in pb]} GNU time max RSS MB {['%.0f' % x[3] for x in pb]}"
                + (
                    f"; msprof-analyze cluster wall {['%.2f' % x[0] for x in ms]} cpu {['%.2f' % x[1] for x in ms]} "
                    f"peak MB {['%.0f' % x[2] for x in ms]} GNU time max RSS MB {['%.0f' % x[3] for x in ms]}; "
                    f"median ratio wall {mmed[0] / med[0]:.1f}x "
                    f"cpu {mmed[1] / med[1]:.1f}x"
                    if ms
                    else ""
                )
                + f" (load average {min(loads):.1f}-{max(loads):.1f}) {found}",
                flush=True,
            )
            if name in base_runs:
                b = base_runs[name]
                bmed = [statistics.median(x[k] for x in b) for k in range(3)]
                print(
                    f"{name}: baseline {args.baseline} analyze wall {['%.2f' % x[0] for x in b]} cpu "
                    f"{['%.2f' % x[1] for x in b]}; this / baseline: median wall {med[0] / bmed[0]:.3f}x, "
                    f"median CPU {med[1] / bmed[1]:.3f}x, peak MB {med[2]:.0f} / {bmed[2]:.0f}",
                    flush=True,
                )
            if args.data_dir is None:
                shutil.rmtree(data, ignore_errors=True)
    print(
        "\n| data | ranks | msprof-analyze cluster -m all: median wall / CPU (s) / tree peak MB / GNU time max RSS MB "
        "| perfbench analyze: median wall / CPU (s) / tree peak MB / GNU time max RSS MB | ratio wall | ratio CPU "
        "| perfbench ms per rank: wall / CPU | load |"
    )
    print("|---|---:|---|---|---:|---:|---|---|")
    for name, ranks, m, p, lo, hi in rows:
        ms_cell = f"{m[0]:.2f} / {m[1]:.2f} / {m[2]:.0f} / {m[3]:.0f}" if m else "not run"
        ratio = (f"{m[0] / p[0]:.1f}x", f"{m[1] / p[1]:.1f}x") if m else ("-", "-")
        print(
            f"| {name} | {ranks} | {ms_cell} | {p[0]:.2f} / {p[1]:.2f} / {p[2]:.0f} / {p[3]:.0f} | {ratio[0]} "
            f"| {ratio[1]} "
            f"| {p[0] / ranks * 1000:.1f} / {p[1] / ranks * 1000:.1f} | {lo:.1f}-{hi:.1f} |"
        )


if __name__ == "__main__":
    main()
