"""One PyTorch profiler (Kineto) Chrome trace, streamed: `read_trace(path) -> KinetoTrace`.

The file (`*.pt.trace.json[.gz]` or any `*.json[.gz]` Kineto wrote) is an object with `traceEvents`
and, from distributed jobs, `distributedInfo` (backend, rank, world_size, pg_config). Events are decoded by
msgspec into typed Structs (`_Event`, `_Args`) that hold only the fields the parser reads: the other fields and
args keys are skipped in C without building a value, so there is no dict per event. Up to 64 MB of
(decompressed) text is decoded at once; a bigger file is streamed (gzip decompressed on the fly): the
`traceEvents` array cut into blocks of about 16 MB between two events (a `},` and a `{` with a line break
between them, as Kineto writes one event per line or more: a line break never occurs inside a JSON string),
each block decoded alone. An event whose values do not fit the types (a string `ts`, a list `args`) sends its
block (or the small file) to orjson's plain dicts, kept the same way (`_keep`); a block that is not JSON (a
cut inside a nested object, a corrupt file) sends the whole file to ijson, event by event, which also names
where it is corrupt. Either way the kept tuples are the same (names interned: one string per distinct name;
args dicts hold only ARG_KEYS), so memory grows with the number of kept events, not with the file's text.
Timestamps are microseconds.

Kept (`ph == "X"` unless said):
* device ops: `cat` kernel, gpu_memcpy, gpu_memset (name, ts, dur, stream, device, correlation, and the
  collective args NCCL kernels carry: Collective name, In/Out msg nelems, dtype, Process Group Name/Ranks,
  Group size);
* launches: `cat` cuda_runtime / cuda_driver (correlation -> thread and time; links a kernel to the CPU);
* `ProfilerStep#N` user annotations (the steps);
* CPU ops (`cat` cpu_op): name, thread, ts, dur; `record_param_comms` with its args (sizes, group);
* `gloo:*` user annotations (collectives of CPU-only jobs) and `nccl:*` ones (around NCCL launches), with
  their input dims and types;
* `[memory]` instant events (`ph == "i"`): allocator totals after each allocation, where recorded.
"""

from __future__ import annotations

import gzip
import math
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec

from perfbench.errors import ProfileFormatError

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
COLLECTIVE_ARGS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "dtype",
    "Process Group Name",
    "Process Group Ranks",
    "Group size",
)
STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
#: the args keys the parser reads (kept args dicts hold these, whichever reader kept them)
ARG_KEYS = (
    "stream",
    "device",
    "correlation",
    *COLLECTIVE_ARGS,
    "Process Group ID",
    "Input Dims",
    "Input type",
    "Total Allocated",
    "Total Reserved",
    "Device Id",
    "Device Type",
)


@dataclass
class KinetoTrace:
    path: Path
    header: dict = field(default_factory=dict)  # distributedInfo, deviceProperties, host_name, ...
    #: (name, cat, ts, dur, stream, device, correlation, collective args dict or None)
    device_ops: list[tuple] = field(default_factory=list)
    #: correlation -> (tid, ts) of the CPU-side launch
    launches: dict[int, tuple] = field(default_factory=dict)
    #: (step number, ts, dur)
    steps: list[tuple] = field(default_factory=list)
    #: (name, tid, ts, dur)
    cpu_ops: list[tuple] = field(default_factory=list)
    #: (tid, ts, dur, args)
    param_comms: list[tuple] = field(default_factory=list)
    #: (name, tid, ts, dur, args)
    gloo: list[tuple] = field(default_factory=list)
    #: `nccl:*` user annotations around NCCL launches: (tid, ts, dur, args with "name")
    nccl: list[tuple] = field(default_factory=list)
    #: (ts, args)
    memory: list[tuple] = field(default_factory=list)
    events: int = 0
    #: the names seen, each kept once (millions of events share a few thousand names)
    names: dict[str, str] = field(default_factory=dict, repr=False)


UNSET: Any = msgspec.UNSET


class _DeviceArgs(msgspec.Struct, gc=False):
    """A device op's args: stream, device, correlation and the collective args NCCL kernels carry (msgspec skips
    the other keys without building them)."""

    stream: Any = UNSET
    device: Any = UNSET
    correlation: Any = UNSET
    collective_name: Any = msgspec.field(default=UNSET, name="Collective name")
    in_nelems: Any = msgspec.field(default=UNSET, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=UNSET, name="Out msg nelems")
    dtype: Any = UNSET
    pg_name: Any = msgspec.field(default=UNSET, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=UNSET, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=UNSET, name="Group size")


class _Args(_DeviceArgs, gc=False):
    """An event's `args`, all the keys in ARG_KEYS (the rare events kept with their args)."""

    pg_id: Any = msgspec.field(default=UNSET, name="Process Group ID")
    input_dims: Any = msgspec.field(default=UNSET, name="Input Dims")
    input_type: Any = msgspec.field(default=UNSET, name="Input type")
    total_allocated: Any = msgspec.field(default=UNSET, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=UNSET, name="Total Reserved")
    device_id: Any = msgspec.field(default=UNSET, name="Device Id")
    device_type: Any = msgspec.field(default=UNSET, name="Device Type")


#: _Args attribute -> JSON key, in ARG_KEYS' order
_ARG_FIELDS = tuple((f.name, f.encode_name) for f in msgspec.structs.fields(_Args))
#: the collective args of a device op (`_DeviceArgs` attribute -> JSON key)
_COLL_FIELDS = tuple((a, k) for a, k in _ARG_FIELDS if k in COLLECTIVE_ARGS)
_coll_values = operator.attrgetter(*(a for a, _k in _COLL_FIELDS))


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Any = UNSET


class _X(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (`ph` X), only the fields kept. `args` stays undecoded text (skipped in C) until an event
    needs it: the launches' correlation, the device ops' args, the rare ones' ARG_KEYS."""

    cat: str | None = None
    name: str | None = None
    ts: float = math.nan
    dur: float = math.nan
    tid: Any = None
    args: msgspec.Raw = msgspec.Raw()


class _Instant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    name: str | None = None
    ts: float = math.nan
    args: msgspec.Raw = msgspec.Raw()


#: every other Chrome-trace phase (flows, metadata, counters, async ...): nothing kept, all its fields skipped.
#: An event without `ph` or with another one fails the block's typed decode (read as plain dicts then)
_SKIPPED = tuple(
    msgspec.defstruct(f"_Skip{i}", [], tag_field="ph", tag=ph, gc=False) for i, ph in enumerate("BEIbnestfPONDMVvRcC()")
)
_EventType = Union[(_X, _Instant, *_SKIPPED)]  # type: ignore[valid-type]


class _Doc(msgspec.Struct):
    traceEvents: list[_EventType] | None = None  # type: ignore[valid-type]
    distributedInfo: Any = UNSET
    deviceProperties: Any = UNSET
    host_name: Any = UNSET
    schemaVersion: Any = UNSET
    displayTimeUnit: Any = UNSET
    traceName: Any = UNSET


_DOC = msgspec.json.Decoder(_Doc)
_EVENTS = msgspec.json.Decoder(list[_EventType])  # type: ignore[valid-type]
_ARGS = msgspec.json.Decoder(_Args)
_DEVICE_ARGS = msgspec.json.Decoder(_DeviceArgs)
_LAUNCH_ARGS = msgspec.json.Decoder(_LaunchArgs)


def _open(path: Path):
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def head(path: Path, n: int = 4096) -> bytes:
    """The first `n` bytes of the (decompressed) file, b"" when unreadable."""
    try:
        with _open(path) as fh:
            return fh.read(n)
    except (OSError, EOFError, gzip.BadGzipFile):
        return b""


def looks_like_kineto(path: Path) -> bool:
    """A JSON object whose first bytes carry Kineto's `schemaVersion` or `distributedInfo`, or a
    `*.pt.trace.json[.gz]` file with `traceEvents`."""
    h = head(path).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not h.startswith(b"{"):
        return False
    if b'"schemaVersion"' in h or b'"distributedInfo"' in h:
        return True
    return ".pt.trace.json" in path.name and b'"traceEvents"' in h


#: a trace whose decompressed text is under this many bytes is decoded at once; a bigger one in blocks, its
#: memory bounded by the events kept
SMALL_TRACE_BYTES = 64 * 1024 * 1024


def read_trace(path: str | Path) -> KinetoTrace:
    """Read one trace file into a KinetoTrace; a truncated or corrupt file raises ProfileFormatError."""
    path = Path(path)
    try:
        with _open(path) as fh:
            text = fh.read(SMALL_TRACE_BYTES + 1)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc})") from None
    if len(text) <= SMALL_TRACE_BYTES:
        out = _read_small(path, text)
    else:
        del text
        out = _read_blocks(path) or _read_streaming(path)
    if out.events == 0:
        raise ProfileFormatError(path, "no traceEvents (not a PyTorch profiler trace)")
    return out


def _read_small(path: Path, text: bytes) -> KinetoTrace:
    """The whole text in one typed msgspec decode; where it does not fit the types (or is not JSON), orjson's
    dicts (which also name what is corrupt)."""
    out = KinetoTrace(path=path)
    try:
        doc = _DOC.decode(text)
    except msgspec.DecodeError:  # a ValidationError too
        return _read_small_dicts(path, text)
    if doc.traceEvents is None:
        raise ProfileFormatError(path, "no traceEvents (not a PyTorch profiler trace)")
    out.header = _doc_header(doc)
    _keep_structs(out, doc.traceEvents)
    return out


def _doc_header(doc: _Doc) -> dict:
    return {k: v for k in HEADER_KEYS if (v := getattr(doc, k)) is not UNSET}


def _read_small_dicts(path: Path, text: bytes) -> KinetoTrace:
    import orjson

    out = KinetoTrace(path=path)
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({str(exc)[:160]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ProfileFormatError(path, "no traceEvents (not a PyTorch profiler trace)")
    out.header = {k: doc[k] for k in HEADER_KEYS if k in doc}
    _keep_all(out, doc["traceEvents"])
    return out


#: the streamed blocks' size: the decoded events of one block (a few hundred bytes of text each) live at once
BLOCK_BYTES = 16 * 1024 * 1024
_EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
#: between two events of the array: `}` `,` `{` with a line break somewhere between them
_BOUNDARY = re.compile(rb"\}[ \t\r]*(?:,[ \t\r]*\n|\n[ \t\r\n]*,)[ \t\r\n]*\{")


def _last_boundary(buf: bytes) -> int | None:
    """Where the last complete event of `buf` ends (the index after its `}`), or None."""
    for start in (max(0, len(buf) - (1 << 20)), 0):
        last = None
        for last in _BOUNDARY.finditer(buf, start):
            pass
        if last is not None:
            return last.start() + 1
        if start == 0:
            break
    return None


def _read_blocks(path: Path) -> KinetoTrace | None:
    """The big file in blocks of whole events, each decoded alone; None when the file does not cut into
    such blocks (the caller then streams it with ijson, which also names what is corrupt)."""
    import orjson

    out = KinetoTrace(path=path)
    try:
        with _open(path) as fh:
            buf = fh.read(BLOCK_BYTES)
            m = _EVENTS_START.search(buf)
            if m is None:
                return None
            try:
                out.header = {
                    k: v
                    for k, v in orjson.loads(buf[: m.start()].rstrip().rstrip(b",") + b"}").items()
                    if k in HEADER_KEYS
                }
            except (orjson.JSONDecodeError, AttributeError):
                return None
            buf = buf[m.end() :]
            while True:
                more = fh.read(BLOCK_BYTES)
                if not more:
                    break
                buf += more
                cut = _last_boundary(buf)
                if cut is None:
                    if len(buf) > 8 * BLOCK_BYTES:
                        return None
                    continue
                _keep_block(out, b"[" + buf[:cut] + b"]")
                buf = buf[cut:].lstrip(b" \t\r\n,")
            tail = b'{"traceEvents": [' + buf
            try:
                doc = _DOC.decode(tail)
                if doc.traceEvents is None:
                    return None
                _keep_structs(out, doc.traceEvents)
                header = _doc_header(doc)
            except msgspec.ValidationError:
                plain = orjson.loads(tail)
                if not isinstance(plain, dict) or not isinstance(plain.get("traceEvents"), list):
                    return None
                _keep_all(out, plain["traceEvents"])
                header = {k: plain[k] for k in HEADER_KEYS if k in plain}
    except (msgspec.DecodeError, orjson.JSONDecodeError, OSError, EOFError):
        return None
    out.header.update({k: v for k, v in header.items() if k not in out.header})
    return out


def _keep_block(out: KinetoTrace, block: bytes) -> None:
    """One block of whole events (a JSON array): typed, or as plain dicts where an event does not fit the types.
    Raises msgspec.DecodeError / orjson.JSONDecodeError when the block is not JSON."""
    try:
        events = _EVENTS.decode(block)
    except msgspec.ValidationError:
        import orjson

        _keep_all(out, orjson.loads(block))
        return
    _keep_structs(out, events)


def _keep_all(out: KinetoTrace, events: list) -> None:
    for ev in events:
        out.events += 1
        if isinstance(ev, dict):
            _keep(out, ev)


def _read_streaming(path: Path) -> KinetoTrace:
    import ijson

    out = KinetoTrace(path=path)
    try:
        out.header = _header(path, ijson)
        with _open(path) as fh:
            for ev in ijson.items(fh, "traceEvents.item", use_float=True):
                out.events += 1
                if isinstance(ev, dict):
                    _keep(out, ev)
    except ijson.common.JSONError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ProfileFormatError(path, f"truncated or corrupt JSON after {out.events} events ({first})") from None
    except (OSError, EOFError) as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc})") from None
    return out


#: top-level keys kept in the header (all but traceEvents are small)
HEADER_KEYS = ("distributedInfo", "deviceProperties", "host_name", "schemaVersion", "displayTimeUnit", "traceName")


def _header(path: Path, ijson) -> dict:
    """The small top-level keys written before `traceEvents` (Kineto writes distributedInfo and the device
    properties first; what comes after the events, e.g. traceName, is not looked for)."""
    header: dict = {}
    with _open(path) as fh:
        builder = None
        key = None
        for prefix, event, value in ijson.parse(fh, use_float=True):
            if builder is not None:
                builder.event(event, value)
                if prefix == key and event in ("end_map", "end_array"):
                    header[key] = builder.value
                    builder = None
            elif prefix == "" and event == "map_key":
                key = value
            elif prefix == "traceEvents":
                break
            elif prefix == key and key in HEADER_KEYS:
                if event in ("start_map", "start_array"):
                    builder = ijson.ObjectBuilder()
                    builder.event(event, value)
                else:
                    header[key] = value
    return header


def _keep(out: KinetoTrace, ev: dict) -> None:
    """One event read as a plain dict (ijson, or a block whose events do not fit `_Event`): what
    `_keep_structs` keeps of it, the same tuples and the same args dicts."""
    ph = ev.get("ph")
    if ph == "i":
        if ev.get("name") == "[memory]":
            out.memory.append((_f(ev.get("ts")), _arg_keys(ev.get("args"))))
        return
    if ph != "X":
        return
    cat = ev.get("cat")
    name = ev.get("name") or ""
    if isinstance(name, str):
        name = out.names.setdefault(name, name)
    args = ev.get("args") or {}
    if cat in DEVICE_CATS:
        coll = {k: args[k] for k in COLLECTIVE_ARGS if k in args} or None
        out.device_ops.append(
            (
                name,
                cat,
                _f(ev.get("ts")),
                _f(ev.get("dur")),
                args.get("stream", ev.get("tid")),
                args.get("device"),
                args.get("correlation"),
                coll,
            )
        )
    elif cat in LAUNCH_CATS:
        corr = args.get("correlation")
        if corr is not None:
            out.launches[int(corr)] = (ev.get("tid"), _f(ev.get("ts")))
    elif cat == "user_annotation":
        m = STEP_RE.match(name)
        if m:
            out.steps.append((int(m.group(1)), _f(ev.get("ts")), _f(ev.get("dur"))))
        elif name.startswith("gloo:"):
            out.gloo.append((name, ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), _arg_keys(args)))
        elif name.startswith("nccl:"):
            out.nccl.append((ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), dict(_arg_keys(args), name=name)))
    elif cat == "cpu_op":
        if name == "record_param_comms":
            out.param_comms.append((ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), _arg_keys(args)))
        else:
            out.cpu_ops.append((name, ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur"))))


def _arg_keys(args) -> dict:
    """The ARG_KEYS of a plain args dict."""
    return {k: args[k] for k in ARG_KEYS if k in args} if isinstance(args, dict) else {}


def _struct_args(a: _Args | None) -> dict:
    """The keys an `_Args` was given, as the plain dict `_arg_keys` keeps."""
    if a is None:
        return {}
    return {k: v for attr, k in _ARG_FIELDS if (v := getattr(a, attr)) is not UNSET}


def _plain(ev: _X | _Instant) -> dict:
    """A typed event as the plain dict it was decoded from (its kept fields), for `_keep`."""
    out = {"ph": "X" if isinstance(ev, _X) else "i", "name": ev.name, "ts": ev.ts}
    if isinstance(ev, _X):
        out.update(cat=ev.cat, dur=ev.dur, tid=ev.tid)
    if ev.args:
        out["args"] = msgspec.json.decode(ev.args)
    return out


def _keep_structs(out: KinetoTrace, events: list) -> None:
    """`_keep` for typed events: the same tuples, without a dict per event. The common events (CPU ops,
    launches, flows) take the first branches; an event whose args are not an object goes through `_keep`."""
    out.events += len(events)
    names = out.names
    cpu_ops = out.cpu_ops.append
    launches = out.launches
    launch_args = _LAUNCH_ARGS.decode
    for ev in events:
        if type(ev) is not _X:
            if type(ev) is _Instant and ev.name == "[memory]":
                _keep_rare(out, ev, "")
            continue
        cat = ev.cat
        name = ev.name or ""
        name = names.setdefault(name, name)
        if cat == "cpu_op":
            if name == "record_param_comms":
                _keep_rare(out, ev, name)
            else:
                cpu_ops((name, ev.tid, ev.ts, ev.dur))
        elif cat in LAUNCH_CATS:
            try:
                corr = launch_args(ev.args).correlation if ev.args else None
            except msgspec.ValidationError:
                _keep(out, _plain(ev))
                continue
            if corr is not UNSET and corr is not None:
                launches[int(corr)] = (ev.tid, ev.ts)
        elif cat in DEVICE_CATS:
            _keep_device_op(out, ev, name)
        elif cat == "user_annotation":
            _keep_annotation(out, ev, name)


def _keep_device_op(out: KinetoTrace, ev: _X, name: str) -> None:
    try:
        a = _DEVICE_ARGS.decode(ev.args) if ev.args else None
    except msgspec.ValidationError:
        _keep(out, _plain(ev))
        return
    if a is None:
        out.device_ops.append((name, ev.cat, ev.ts, ev.dur, ev.tid, None, None, None))
        return
    coll = None
    values = _coll_values(a)
    if values.count(UNSET) != len(values):  # an NCCL kernel's collective args
        coll = {k: v for (_attr, k), v in zip(_COLL_FIELDS, values) if v is not UNSET}
    stream = ev.tid if a.stream is UNSET else a.stream
    device = None if a.device is UNSET else a.device
    corr = None if a.correlation is UNSET else a.correlation
    out.device_ops.append((name, ev.cat, ev.ts, ev.dur, stream, device, corr, coll))


def _keep_annotation(out: KinetoTrace, ev: _X, name: str) -> None:
    m = STEP_RE.match(name)
    if m:
        out.steps.append((int(m.group(1)), ev.ts, ev.dur))
    elif name.startswith(("gloo:", "nccl:")):
        _keep_rare(out, ev, name)


def _keep_rare(out: KinetoTrace, ev: _X | _Instant, name: str) -> None:
    """The few events kept with their args (ARG_KEYS): record_param_comms, gloo:/nccl: annotations, [memory]."""
    try:
        args = _struct_args(_ARGS.decode(ev.args) if ev.args else None)
    except msgspec.ValidationError:
        _keep(out, _plain(ev))
        return
    if isinstance(ev, _Instant):
        out.memory.append((ev.ts, args))
    elif name == "record_param_comms":
        out.param_comms.append((ev.tid, ev.ts, ev.dur, args))
    elif name.startswith("gloo:"):
        out.gloo.append((name, ev.tid, ev.ts, ev.dur, args))
    else:
        out.nccl.append((ev.tid, ev.ts, ev.dur, dict(args, name=name)))


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")
