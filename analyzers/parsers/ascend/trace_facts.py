"""trace_view.json facts for one rank of the Ascend text export: host step windows (ProfilerStep#N, for Preparing),
HCCL op sizes and algorithms (`count` x `data_type`, `alg_type`) and, when kernel_details.csv is missing, the device
ops of the Ascend Hardware process (the fallback kernels). Small files are read in one orjson pass, larger ones
streamed (`analyzers.parsers.trace_view.x_events`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from analyzers.parsers.ascend.common import DTYPE_BYTES, categorize, comm_op_type
from analyzers.parsers.trace_view import SMALL_FILE_BYTES, TraceEvents, x_events
from analyzers.schema import OPS, empty
from perfbench.errors import ProfileFormatError

_STEP_RE = re.compile(r"ProfilerStep#(\d+)")


def trace_facts(path: Path, r: int, full: bool = False) -> dict:
    """Host step windows, HCCL op sizes/algorithms, and (fallback, `full`) device ops from trace_view.json."""
    if path.stat().st_size < SMALL_FILE_BYTES:
        return _facts_from(_small_trace(path, full), r)
    return _facts_from(x_events(path, args_prefix="hcom_", args_fields=("count", "data_type", "alg_type")), r)


def _small_trace(path: Path, full: bool = True):
    """A small trace in one read: a typed msgspec decode (`_typed_events`), or orjson where that does not apply
    (`_loose_events`; several times faster than streaming for a few MB). Without `full`, only the X events the
    facts need (ProfilerStep#N, hcom_*) are kept."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    events = _typed_events(raw)
    return _trace_events(_loose_events(path, raw) if events is None else events, full)


class _Event(msgspec.Struct, gc=False):
    """A trace event's fields `_trace_events` reads (msgspec skips the others without building them; `args` kept as
    raw JSON, decoded only for the events that need it)."""

    ph: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = msgspec.UNSET
    cat: Any = None
    args: msgspec.Raw = msgspec.Raw()


class _Document(msgspec.Struct, gc=False):
    traceEvents: list[_Event]


_DECODER = msgspec.json.Decoder(list[_Event] | _Document)


def _typed_events(raw: bytes) -> list[_Event] | None:
    """The events of a typed msgspec decode (~4x orjson on an 11 MB trace_view.json: no dict per event); None when
    the file is anything but a plain array of event objects (or {"traceEvents": [...]}), and `_loose_events` then
    reads it (and reports what is wrong)."""
    try:
        got = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return got.traceEvents if isinstance(got, _Document) else got


def _loose_events(path: Path, raw: bytes) -> list[_Event]:
    """The event objects of a trace the typed decode refused (other items beside the events are passed over), as
    `_Event`s, through orjson; a clear error when it is no Chrome trace at all."""
    try:
        import orjson

        loads = orjson.loads
        errors = (orjson.JSONDecodeError,)
    except ImportError:  # pragma: no cover - orjson is a dependency
        import json

        loads = json.loads
        errors = (json.JSONDecodeError,)
    try:
        data = loads(raw)
    except errors as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({str(exc)[:160]})") from None
    if isinstance(data, dict):
        data = data.get("traceEvents")
    if not isinstance(data, list):
        raise ProfileFormatError(path, "not a Chrome-trace JSON array")
    fields = ("ph", "name", "pid", "tid", "ts", "cat")
    return [
        _Event(
            **{k: ev.get(k) for k in fields},
            dur=ev.get("dur", msgspec.UNSET),
            args=msgspec.Raw(msgspec.json.encode(ev["args"])) if "args" in ev else msgspec.Raw(),
        )
        for ev in data
        if isinstance(ev, dict)
    ]


def _trace_events(events: list[_Event], full: bool) -> TraceEvents:
    """TraceEvents of the X events (without `full`, only ProfilerStep#N and hcom_*; `args` decoded for hcom_*
    only) and the process and thread names of the M events."""

    def args_of(ev):
        if not len(ev.args):
            return None
        return msgspec.json.decode(ev.args)

    pn: dict = {}
    tn: dict = {}
    cols: dict = {"name": [], "pid": [], "tid": [], "ts": [], "dur": [], "cat": [], "args": []}
    wanted = ("ProfilerStep#", "hcom_")
    for ev in events:
        ph, name = ev.ph, ev.name
        if ph == "X":
            text = type(name) is str or isinstance(name, str)
            if not full and not (text and name.startswith(wanted)):
                continue
            hcom = text and name.startswith("hcom_")
            cols["name"].append(name)
            cols["pid"].append(str(ev.pid))
            cols["tid"].append(str(ev.tid))
            try:
                cols["ts"].append(float(ev.ts))
            except (TypeError, ValueError):
                cols["ts"].append(np.nan)
            try:
                cols["dur"].append(0.0 if ev.dur is msgspec.UNSET else float(ev.dur))
            except (TypeError, ValueError):
                cols["dur"].append(np.nan)
            cols["cat"].append(ev.cat)
            cols["args"].append(args_of(ev) if hcom else None)
        elif ph == "M" and name in ("process_name", "thread_name"):
            a = args_of(ev) or {}
            if isinstance(a, dict) and "name" in a:
                if name == "process_name":
                    pn[str(ev.pid)] = str(a["name"])
                else:
                    tn[(str(ev.pid), str(ev.tid))] = str(a["name"])
    return TraceEvents(pd.DataFrame(cols), pn, tn)


def _facts_from(te, r: int) -> dict:

    x = te.x
    facts: dict = {"host_steps": {}, "hccl_sizes": {}, "hccl_alg": {}, "device_ops": None, "hccl_ops": empty(OPS)}
    steps = x[x["name"].astype(str).str.startswith("ProfilerStep#")]
    for name, ts, dur in zip(steps["name"], steps["ts"], steps["dur"]):
        m = _STEP_RE.match(name)
        if m:
            s = int(m.group(1))
            lo, hi = facts["host_steps"].get(s, (np.inf, -np.inf))
            facts["host_steps"][s] = (min(lo, ts), max(hi, ts + dur))
    hccl_pids = [p for p, n in te.process_names.items() if n == "HCCL"]
    comm_tids = {k for k, n in te.thread_names.items() if k[0] in hccl_pids and "Communication" in n}
    if hccl_pids:
        hx = x[x["pid"].isin(hccl_pids)]
        top = hx[[(p, t) in comm_tids for p, t in zip(hx["pid"], hx["tid"])]] if comm_tids else hx.iloc[0:0]
        if len(top):
            for name, a in zip(top["name"], top["args"]):
                if not isinstance(a, dict):
                    continue
                cnt, dt = a.get("count"), str(a.get("data_type", "")).upper()
                if cnt is not None and dt in DTYPE_BYTES:
                    try:
                        facts["hccl_sizes"][name] = float(cnt) * DTYPE_BYTES[dt]
                    except (TypeError, ValueError):
                        pass
                if a.get("alg_type"):
                    facts["hccl_alg"][name] = a.get("alg_type")
            facts["hccl_ops"] = pd.DataFrame(
                {
                    "rank": r,
                    "step": np.nan,
                    "name": top["name"].to_numpy(),
                    "type": top["name"].map(comm_op_type).to_numpy(),
                    "category": "communication",
                    "start_us": top["ts"].to_numpy(),
                    "dur_us": top["dur"].to_numpy(),
                    "stream": top["tid"].to_numpy(),
                    "core_type": "HCCL",
                }
            )
    hw = [p for p, n in te.process_names.items() if n == "Ascend Hardware"]
    if hw:
        d = x[x["pid"].isin(hw)]
        d = d[~d["name"].isin(["PROFILING_ENABLE", "PROFILING_DISABLE"])]
        facts["device_ops"] = pd.DataFrame(
            {
                "rank": r,
                "step": np.nan,
                "name": d["name"].to_numpy(),
                "type": None,
                "category": categorize(d["name"], None, None).to_numpy(),
                "start_us": d["ts"].to_numpy(),
                "dur_us": d["dur"].to_numpy(),
                "stream": d["tid"].to_numpy(),
                "core_type": None,
            }
        )
        if facts["host_steps"] and len(facts["device_ops"]):
            # device ops have no step id in the trace: assign by host step window order
            facts["device_ops"]["step"] = _assign_by_windows(facts["device_ops"]["start_us"], facts["host_steps"])
    return facts


def _assign_by_windows(ts: pd.Series, windows: dict[int, tuple[float, float]]) -> np.ndarray:
    order = sorted(windows.items(), key=lambda kv: kv[1][0])
    starts = np.array([w[0] for _, w in order])
    ids = np.array([s for s, _ in order], dtype=float)
    idx = np.searchsorted(starts, ts.to_numpy(), side="right") - 1
    out = np.where(idx >= 0, ids[np.clip(idx, 0, None)], np.nan)
    return out
