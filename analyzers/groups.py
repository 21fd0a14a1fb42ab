"""Parallel groups (dp / pp / tp / ep / cp ... with their global ranks) as the profilers' files name them: one
structure and its readers, below both the parsers (which fill it) and the analyses (which read it; stages and
link ranks are analyses/parallel_groups.py).

One structure, in `Profile.meta["parallel_groups"]`:

    {group name: {"ranks": [global ranks, sorted], "kind": "dp"|"pp"|"tp"|"ep"|"cp"|"stage"|None,
                  "source": where it was read, "label": the framework's name (pg_name), "stage": i (kind "stage")}}

The group name is the one the communication files use (`communication.json` keys `op@GROUP`,
`analysis.db` `group_name`): torch_npu hashes the process-group id with msprof-analyze's `double_hash`,
so an entry is stored under the hashed id, the raw id and the framework's label alike. Readers:

* `groups_from_metadata(profiler_metadata.json)` - `parallel_group_info` {group id: {"group_name",
  "global_ranks"}} (torch_npu); `distributed_args` (Megatron sizes) is kept apart, see `stage_of_rank`.
* `groups_from_db_meta(con)` - the same two keys in the profiler db's `META_DATA` table.
* `groups_from_communication_group(communication_group.json)` - msprof-analyze's cluster output
  (`comm_group_parallel_info`: group_name, pg_name, rank_set in global ranks).
* `groups_from_strategy(parallel_strategy_*.json)` - MindSpore's `config.stageDevices` (devices of
  each pipeline stage) -> one "stage" group per stage.

`group_ranks(entry)` accepts both this structure and a bare list of ranks.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path


#: words in a group's label that name its kind (first word wins: "dp_cp" is the data-parallel gradient group)
KIND_WORDS = {
    "dp": "dp",
    "data": "dp",
    "pp": "pp",
    "pipeline": "pp",
    "tp": "tp",
    "tensor": "tp",
    "ep": "ep",
    "expert": "ep",
    "exp": "ep",
    "cp": "cp",
    "context": "cp",
    "stage": "stage",
}
#: Megatron's `distributed_args` keys (msprof-analyze base_recipe_analysis.map_rank_pp_stage)
PP_SIZE = "pipeline_model_parallel_size"


def double_hash(data: str) -> int:
    """msprof-analyze's `cluster_analyse.common_func.utils.double_hash`: the group name torch_npu writes
    into the communication files is this hash of the process-group id (two 32-bit polynomial hashes)."""
    h0 = h1 = 0
    for ch in str(data):
        h0 = (h0 * 29 + ord(ch)) & 0xFFFFFFFF
        h1 = (h1 * 131 + ord(ch)) & 0xFFFFFFFF
    return (h0 << 32) | h1


def kind_of(label) -> str | None:
    """'dp' | 'pp' | 'tp' | 'ep' | 'cp' | 'stage' from a group label such as 'dp', 'pp_group', 'stage1'; None if
    unknown."""
    words = [w for w in re.split(r"[^a-z]+", str(label or "").lower()) if w]
    return KIND_WORDS.get(words[0]) if words else None


def group_ranks(entry) -> list[int]:
    """The global ranks of a group entry (this module's dict, or a bare list)."""
    if isinstance(entry, dict):
        entry = entry.get("ranks") or []
    try:
        return sorted(int(r) for r in entry or [])
    except (TypeError, ValueError):
        return []


def group_entry(ranks, kind, source, label=None, **extra) -> dict:
    return {"ranks": group_ranks(list(ranks)), "kind": kind, "source": source, "label": label, **extra}


def _from_group_info(pgi, source: str) -> dict:
    out: dict = {}
    if isinstance(pgi, str):
        try:
            pgi = json.loads(pgi)
        except ValueError:
            try:
                pgi = ast.literal_eval(pgi)
            except (ValueError, SyntaxError):
                return out
    if not isinstance(pgi, dict):
        return out
    for gid, g in pgi.items():
        if not isinstance(g, dict) or not isinstance(g.get("global_ranks"), list):
            continue
        label = g.get("group_name") or None
        e = group_entry(g["global_ranks"], kind_of(label), source, label)
        for key in dict.fromkeys(
            [str(double_hash(str(gid))), str(gid), *([str(label)] if label else [])]
        ):  # fixed order
            out[key] = e
    return out


def groups_from_metadata(metadata: dict | None) -> dict:
    """Groups from a profiler_metadata.json document (its `parallel_group_info`)."""
    return _from_group_info((metadata or {}).get("parallel_group_info"), "profiler_metadata")


def db_meta(con) -> dict:
    """`parallel_group_info` and `distributed_args` from a profiler db's META_DATA table (as parsed JSON)."""
    try:
        rows = con.execute(
            "SELECT name, value FROM META_DATA WHERE name IN ('parallel_group_info', 'distributed_args')"
        ).fetchall()
    except Exception:
        return {}
    out = {}
    for name, value in rows:
        try:
            out[name] = json.loads(value)
        except (TypeError, ValueError):
            try:
                out[name] = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                continue
    return out


def groups_from_db_meta(con) -> dict:
    """Groups from the profiler db's META_DATA `parallel_group_info` row."""
    return _from_group_info(db_meta(con).get("parallel_group_info"), "db META_DATA")


def add_db_meta(meta: dict, con) -> None:
    """Merge a profiler db's META_DATA groups and distributed_args into a rank's Profile.meta."""
    dbm = db_meta(con)
    meta["parallel_groups"] = dict(meta.get("parallel_groups") or {})
    meta["parallel_groups"].update(_from_group_info(dbm.get("parallel_group_info"), "db META_DATA"))
    if isinstance(dbm.get("distributed_args"), dict):
        meta["distributed_args"] = meta.get("distributed_args") or dbm["distributed_args"]


def groups_from_communication_group(path) -> dict:
    """Groups from msprof-analyze's communication_group.json (`comm_group_parallel_info`, else the
    bare `collective` / `p2p` rank lists, named by position)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    out: dict = {}
    for g in doc.get("comm_group_parallel_info") or []:
        if not isinstance(g, dict) or not g.get("group_name"):
            continue
        label = g.get("pg_name") or None
        out[str(g["group_name"])] = group_entry(
            g.get("rank_set") or [], kind_of(label), "communication_group", label, type=g.get("type")
        )
    return out


def groups_from_strategy(paths) -> dict:
    """One "stage" group per pipeline stage from MindSpore parallel_strategy_*.json (`config.stageDevices`:
    for each stage, `dim` lists its device ranks)."""
    out: dict = {}
    for p in paths:
        try:
            cfg = json.loads(Path(p).read_text()).get("config") or {}
        except (OSError, ValueError, AttributeError):
            continue
        for i, st in enumerate(cfg.get("stageDevices") or []):
            dims = st.get("dim") if isinstance(st, dict) else None
            try:
                ranks = [int(d.get("size")) for d in dims or []]
            except (TypeError, ValueError, AttributeError):
                continue
            if ranks:
                out[f"stage{i}"] = group_entry(ranks, "stage", "parallel_strategy", f"stage{i}", stage=i)
    return out
