"""Hardware profiles: which link a group of n ranks uses (bandwidth, latency), whether communication
overlaps the backward pass, and how compute time carries over from the machine the runs measured.

A profile is a YAML file (perfbench/predict/hardware/*.yaml; `--hardware NAME` finds these by name,
any other value is a path):

    name: ascend910
    kind: spec | measured            # spec: from published specifications; measured: fitted from runs
    links:                           # the first link whose max_ranks >= n carries a group of n ranks
      - {transport: HCCS, max_ranks: 4, bandwidth_gbps: 30.0, latency_us: 5.0}
      - {transport: RoCE, max_ranks: null, bandwidth_gbps: 12.5, latency_us: 20.0}
    overlap: window | none           # window: buckets all-reduce while backward runs (separate stream)
    overlap_fraction: 0.0            # with overlap none: measured share of communication hidden anyway
    compute_scale: 1.0               # per-rank compute time = measured x compute_scale (null: unknown)
    precisions: [fp32, fp16]         # train.precision values the backend has kernels for (absent: not known)
    precision_scale: {fp16: 1.1}     # per-rank compute in that precision / in fp32 (absent: not known)
    contention: {1: 1.0, 2: 1.3}     # measured machine: per-rank compute time vs 1 rank (shared cores)
    device_memory_bytes: 34359738368 # memory per device (HBM); null on CPU (the machine's, recorded per run)
    reference_bandwidth_gbps: {HCCS: 18.0}  # what a healthy link reaches in practice, per profiler transport
                                     # (read by advice's bandwidth_reference rule from ascend910.yaml)
    sources: [...]                   # where each number comes from

Bandwidths are GB/s (1e9 bytes/s) per rank and direction, latencies microseconds per ring hop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from perfbench.errors import UserError

BUILTIN = Path(__file__).with_name("hardware")


@dataclass
class Link:
    transport: str
    bandwidth_gbps: float
    latency_us: float
    max_ranks: int | None = None


@dataclass
class Hardware:
    name: str
    kind: str
    links: list[Link]
    overlap: str = "none"
    overlap_fraction: float = 0.0
    compute_scale: float | None = 1.0
    #: train.precision values the backend has kernels for (None: not known, every one allowed)
    precisions: list[str] | None = None
    #: per-rank compute time in a precision / in fp32 (measured machine: fitted from runs in that precision)
    precision_scale: dict[str, float] = field(default_factory=dict)
    contention: dict[int, float] = field(default_factory=dict)
    cores: int | None = None
    #: memory one rank can use: a device's HBM, or on CPU null (the machine's memory: a run's ranks record
    #: MemTotal and memory_headroom uses that; docs/concepts.md)
    device_memory_bytes: int | None = None
    #: per transport as the profiler names it, the bandwidth a healthy link reaches in practice (GB/s)
    reference_bandwidth_gbps: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def link(self, n: int) -> Link:
        for lk in self.links:
            if lk.max_ranks is None or n <= lk.max_ranks:
                return lk
        return self.links[-1]

    def contention_at(self, n: int) -> tuple[float, str | None]:
        """Per-rank compute factor at n ranks and, when it is extrapolated, why."""
        if not self.contention:
            return 1.0, None
        if n in self.contention:
            return self.contention[n], None
        known = sorted(self.contention)
        if n < known[0]:
            return self.contention[
                known[0]
            ], f"per-rank compute factor at {n} ranks taken from {known[0]} ranks (the fewest measured)"
        lo = max(k for k in known if k < n)
        hi = min([k for k in known if k > n], default=None)
        if hi is not None:
            f = self.contention[lo] + (self.contention[hi] - self.contention[lo]) * (n - lo) / (hi - lo)
            return f, f"per-rank compute factor at {n} ranks interpolated between {lo} and {hi} ranks"
        f = self.contention[known[-1]]
        return f, (
            f"per-rank compute factor at {n} ranks taken from {known[-1]} ranks (the largest measured); "
            + (
                f"{n} ranks on {self.cores} cores are oversubscribed, so this is optimistic"
                if self.cores and n > self.cores
                else ""
            )
        )

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "links": [
                {
                    "transport": lk.transport,
                    "max_ranks": lk.max_ranks,
                    "bandwidth_gbps": lk.bandwidth_gbps,
                    "latency_us": lk.latency_us,
                }
                for lk in self.links
            ],
            "overlap": self.overlap,
            "overlap_fraction": self.overlap_fraction,
            "compute_scale": self.compute_scale,
            "precisions": self.precisions,
            "precision_scale": dict(self.precision_scale),
            "contention": {int(k): float(v) for k, v in self.contention.items()},
            "cores": self.cores,
            "device_memory_bytes": self.device_memory_bytes,
            "reference_bandwidth_gbps": dict(self.reference_bandwidth_gbps),
            "sources": self.sources,
            "notes": self.notes,
        }


def from_dict(d: dict, where: str = "hardware profile") -> Hardware:
    try:
        links = [
            Link(
                str(x["transport"]),
                float(x["bandwidth_gbps"]),
                float(x["latency_us"]),
                None if x.get("max_ranks") is None else int(x["max_ranks"]),
            )
            for x in d["links"]
        ]
        if not links or any(lk.bandwidth_gbps <= 0 or lk.latency_us < 0 for lk in links):
            raise ValueError("links need bandwidth_gbps > 0 and latency_us >= 0")
        overlap = str(d.get("overlap", "none"))
        if overlap not in ("none", "window"):
            raise ValueError(f"overlap must be none or window, got {overlap!r}")
        scale = d.get("compute_scale", 1.0)
        return Hardware(
            name=str(d["name"]),
            kind=str(d.get("kind", "spec")),
            links=links,
            overlap=overlap,
            overlap_fraction=float(d.get("overlap_fraction") or 0.0),
            compute_scale=None if scale is None else float(scale),
            precisions=None if d.get("precisions") is None else [str(x) for x in d["precisions"]],
            precision_scale={str(k): float(v) for k, v in (d.get("precision_scale") or {}).items()},
            contention={int(k): float(v) for k, v in (d.get("contention") or {}).items()},
            cores=d.get("cores"),
            device_memory_bytes=None if d.get("device_memory_bytes") is None else int(d["device_memory_bytes"]),
            reference_bandwidth_gbps={str(k): float(v) for k, v in (d.get("reference_bandwidth_gbps") or {}).items()},
            sources=list(d.get("sources") or []),
            notes=list(d.get("notes") or []),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{where}: {exc.__class__.__name__ if isinstance(exc, KeyError) else ''}{exc} "
            "(see perfbench/predict/hardware.py for the format)"
        ) from None


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN.glob("*.yaml"))


def load(name_or_path: str) -> Hardware:
    p = Path(name_or_path)
    if not p.exists() and (BUILTIN / f"{name_or_path}.yaml").exists():
        p = BUILTIN / f"{name_or_path}.yaml"
    if not p.exists():
        raise UserError(
            f"no hardware profile {name_or_path!r}: give a YAML file or one of {', '.join(builtin_names())}"
        )
    try:
        d = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise UserError(f"{p}: a hardware profile is a YAML mapping")
    return from_dict(d, str(p))


def save(hw: Hardware, path: str) -> None:
    Path(path).write_text(yaml.safe_dump(hw.to_dict(), sort_keys=False))
