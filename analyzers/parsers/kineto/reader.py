"""One PyTorch profiler (Kineto) Chrome trace, streamed: `read_trace(path) -> KinetoTrace`.

The file (`*.pt.trace.json[.gz]` or any `*.json[.gz]` Kineto wrote) is an object with `traceEvents`
and, from distributed jobs, `distributedInfo` (backend, rank, world_size, pg_config). Up to 64 MB of
(decompressed) text it is read in one orjson.loads; a bigger file is streamed (gzip decompressed on the fly):
the `traceEvents` array cut into blocks of about 16 MB between two events (a `},` and a `{` with a line break
between them, as Kineto writes one event per line or more: a line break never occurs inside a JSON string),
each block read by orjson; a block that does not parse (a cut inside a nested object, a corrupt file) sends the
whole file to ijson instead, event by event. Either way only the fields the parser uses are kept per event
(names interned: one string per distinct name), so memory grows with the number of kept events, not with the
file's text. Timestamps are microseconds.

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
import re
from dataclasses import dataclass, field
from pathlib import Path

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


#: a trace whose decompressed text is under this many bytes is read in one orjson.loads (several times faster
#: than streaming); a bigger one is streamed with ijson, its memory bounded by the events kept
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
    import orjson

    out = KinetoTrace(path=path)
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ProfileFormatError(path, f"truncated or corrupt JSON ({str(exc)[:160]})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ProfileFormatError(path, "no traceEvents (not a PyTorch profiler trace)")
    out.header = {k: doc[k] for k in HEADER_KEYS if k in doc}
    for ev in doc["traceEvents"]:
        out.events += 1
        if isinstance(ev, dict):
            _keep(out, ev)
    return out


#: the streamed blocks' size: orjson's events of one block (a few hundred bytes of text each) live at once
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
    """The big file in blocks of whole events, each parsed by orjson; None when the file does not cut into
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
                events = orjson.loads(b"[" + buf[:cut] + b"]")
                buf = buf[cut:].lstrip(b" \t\r\n,")
                _keep_all(out, events)
                del events
            doc = orjson.loads(b'{"traceEvents": [' + buf)
    except (orjson.JSONDecodeError, OSError, EOFError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return None
    _keep_all(out, doc["traceEvents"])
    out.header.update({k: doc[k] for k in HEADER_KEYS if k in doc and k not in out.header})
    return out


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
    ph = ev.get("ph")
    if ph == "i":
        if ev.get("name") == "[memory]":
            out.memory.append((_f(ev.get("ts")), ev.get("args") or {}))
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
            out.gloo.append((name, ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), args))
        elif name.startswith("nccl:"):
            out.nccl.append((ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), dict(args, name=name)))
    elif cat == "cpu_op":
        if name == "record_param_comms":
            out.param_comms.append((ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur")), args))
        else:
            out.cpu_ops.append((name, ev.get("tid"), _f(ev.get("ts")), _f(ev.get("dur"))))


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")
