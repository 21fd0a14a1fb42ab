"""Finding msprof output: its folders (PROF_* jobs, mindstudio_profiler_output/, device_N/timeline/), file kinds,
timestamp/device suffixes, `_slice_N` parts, and whose they are (device, rank, device meta)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from perfbench.errors import ProfileFormatError

#: summary / timeline kinds msprof writes into mindstudio_profiler_output/ (longest names first)
KINDS = (
    "communication_statistic",
    "ai_core_utilization",
    "api_statistic",
    "op_statistic",
    "op_summary",
    "step_trace",
    "task_time",
    "msprof",
    "hccl",
)
_SUFFIX = re.compile(r"^(?P<parts>(?:_\d+)*)(?:_slice_(?P<slice>\d+))?(?P<tail>(?:_\d+)*)$")


def classify(name: str) -> tuple[str, str, int] | None:
    """'op_summary_20260823165421.csv' -> ('op_summary', '_20260823165421', 0);
    'op_summary_0_1_slice_2.csv' -> ('op_summary', '_0_1', 2); non-msprof names -> None."""
    for ext in (".csv", ".json"):
        if name.endswith(ext):
            stem = name[: -len(ext)]
            break
    else:
        return None
    for kind in KINDS:
        if stem == kind or stem.startswith(kind + "_"):
            rest = stem[len(kind) :]
            m = _SUFFIX.match(rest)
            if not m:
                return None
            if kind == "msprof" and ext != ".json":
                return None
            if kind != "msprof" and kind != "hccl" and ext != ".csv":
                return None
            return kind, (m.group("parts") or "") + (m.group("tail") or ""), int(m.group("slice") or 0)
    return None


def summary_files(out_dir: Path) -> dict[str, list[Path]]:
    """kind -> files of the newest export of that kind, slices in order."""
    groups: dict[str, dict[str, list[tuple[int, Path]]]] = {}
    for p in sorted(out_dir.iterdir()):
        if not p.is_file():
            continue
        c = classify(p.name)
        if c is None:
            continue
        kind, key, sl = c
        groups.setdefault(kind, {}).setdefault(key, []).append((sl, p))
    out = {}
    for kind, by_key in groups.items():
        # several exports of one kind differ in their timestamp suffix: the newest wins; its
        # _slice_N parts (msprof_<ts>_slice_N.json, op_summary_<ts>_slice_N.csv) are all kept
        key = max(by_key, key=_key_order)
        out[kind] = [p for _, p in sorted(by_key[key])]
    return out


def _key_order(key: str):
    nums = [int(x) for x in key.split("_") if x.isdigit()]
    return (len(nums), nums)


def read_json_dict(path: Path) -> dict:
    """A JSON file holding one object (a clear error naming the file otherwise)."""
    try:
        with open(path, encoding="utf-8") as fh:
            d = json.load(fh)
    except ValueError as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({exc})") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    if not isinstance(d, dict):
        raise ProfileFormatError(path, "expected a JSON object")
    return d


def device_info(dev_dir: Path) -> dict:
    """info.json.<N> of a device_N folder ({} if absent)."""
    for p in sorted(dev_dir.glob("info.json.*")):
        if p.name.endswith(".done"):
            continue
        return read_json_dict(p)
    return {}


def device_id(dev_dir: Path) -> int | None:
    m = re.match(r"^device_(\d+)$", dev_dir.name)
    return int(m.group(1)) if m else None


#: the summary folder of a PROF_* job
OUT_DIR = "mindstudio_profiler_output"
#: how deep below a given folder find_units looks
MAX_DEPTH = 4


#: a timeline export's file: {kind}_{dev}_{model}_{iter}[_slice_N].json
TIMELINE_RX = re.compile(r"^(msprof|hccl|task_time|step_trace)_(\d+)_(\d+)_(\d+)(?:_slice_\d+)?\.json$")


def timeline_dir(d: Path) -> bool:
    tl = d / "timeline"
    return tl.is_dir() and any(TIMELINE_RX.match(p.name) for p in tl.iterdir())


def _is_unit(d: Path) -> bool:
    """A PROF_* job folder, its mindstudio_profiler_output/, or a device_N folder with timeline/."""
    if d.name == OUT_DIR:
        return any(p.is_file() and p.suffix in (".csv", ".json") for p in d.iterdir())
    if (d / OUT_DIR).is_dir():
        return True
    if d.name.startswith("device_") and timeline_dir(d):
        return True
    return any(c.is_dir() and c.name.startswith("device_") and timeline_dir(c) for c in d.iterdir())


def detect(path) -> bool:
    """True if `path` itself is an msprof output folder (looks at its direct children only)."""
    path = Path(path)
    try:
        return path.is_dir() and _is_unit(path)
    except OSError:
        return False


def has_devices(d: Path) -> bool:
    return any(c.is_dir() and c.name.startswith("device_") for c in d.iterdir())


def find_units(path: Path) -> list[Path]:
    """`path` if it is an msprof output folder, else those below it (up to MAX_DEPTH; none inside another)."""
    if _is_unit(path):
        return [path]
    found = []
    base = len(path.parts)
    for d in sorted(p for p in path.rglob("*") if p.is_dir()):
        if len(d.parts) - base > MAX_DEPTH or any(d.is_relative_to(u) for u in found):
            continue
        if _is_unit(d):
            found.append(d)
    return found


def rank_of(info: dict, dev: int | None, fallback: int | None) -> tuple[int, str]:
    """(rank, device label): info.json's rank_id when >= 0, else the device id, else `fallback`, else 0."""
    rid = info.get("rank_id") if info else None
    try:
        rid = int(rid) if rid is not None else None
    except (TypeError, ValueError):
        rid = None
    if rid is not None and rid >= 0:
        return rid, str(dev if dev is not None else rid)
    if dev is not None:
        return dev, str(dev)
    if fallback is not None:
        return fallback, str(fallback)
    return 0, "0"


def rank_part(info: dict, dev: int | None) -> dict[str, Any]:
    """What reading one msprof unit (a summary folder, a device's timeline export) yields for parser.parse to
    assemble: its rank and device (rank_of), `ops` (a frame, or None), lists of row dicts (`steps`, `ref`, `comm`,
    `links`, `bw`), the `inputs` read, `warnings` and `meta`."""
    rank, device = rank_of(info, dev, None)
    return {
        "rank": rank,
        "device": device,
        "ops": None,
        "steps": [],
        "ref": [],
        "comm": [],
        "links": [],
        "bw": [],
        "inputs": [],
        "warnings": [],
        "meta": {},
    }


def device_meta(info: dict) -> dict:
    d = (info.get("DeviceInfo") or [{}])[0] if isinstance(info.get("DeviceInfo"), list) else {}
    pv = str(info.get("platform_version", ""))
    return {
        "ai_core_num": d.get("ai_core_num"),
        "aiv_num": d.get("aiv_num"),
        "aic_frequency": d.get("aic_frequency"),
        "platform_version": pv,
        "npu": {"1": "Ascend910", "5": "Ascend910B"}.get(pv, pv or None),
        "hostname": info.get("hostname"),
        "rank_id": info.get("rank_id"),
    }
