"""Finding msprof output files: kinds, timestamp/device suffixes, `_slice_N` parts, rank ids."""

from __future__ import annotations

import json
import re
from pathlib import Path

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


def read_json_obj(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except ValueError as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({exc})") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None


def device_info(dev_dir: Path) -> dict:
    """info.json.<N> of a device_N folder ({} if absent)."""
    for p in sorted(dev_dir.glob("info.json.*")):
        if p.name.endswith(".done"):
            continue
        d = read_json_obj(p)
        if not isinstance(d, dict):
            raise ProfileFormatError(p, "expected a JSON object")
        return d
    return {}


def device_id(dev_dir: Path) -> int | None:
    m = re.match(r"^device_(\d+)$", dev_dir.name)
    return int(m.group(1)) if m else None
