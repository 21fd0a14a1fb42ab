"""The dashboard's only door to the results: a small cached, read-only layer over perfbench.store.Store.

Pages ask for aggregates (run records, the runs grid, one run's analysis tables), never raw events.
Run records are cached by their file's mtime, so a refresh re-reads only runs that changed (a sweep
running next to the dashboard shows up without a restart); tables are cached per (run, name, mtime)
in a bounded LRU.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict

import numpy as np
import pandas as pd

from analyzers.schema import STEP_SHARE_PARTS
from perfbench.errors import UserError
from perfbench.predict.fit import calibrate
from perfbench.predict.model import curve
from perfbench.store import Store, flatten_runs
from perfbench.views.results import baselines, scaling_efficiency

#: how long one scan of the runs folder is reused (a run written meanwhile shows up on the next refresh after it)
SCAN_TTL_S = 2.0


class DashData:
    def __init__(self, results: str | os.PathLike, table_cache: int = 256):
        self.store = Store(results, create=False)
        self._lock = threading.Lock()
        self._records: dict[str, tuple[int, dict]] = {}
        self._sig: tuple | None = None
        self._scanned_at = 0.0
        self._frame: pd.DataFrame | None = None
        self._tables: OrderedDict = OrderedDict()
        self._table_cache = table_cache

    # ---- runs ------------------------------------------------------------------------------
    def _scan(self) -> tuple:
        d = self.store.runs_dir
        if not d.exists():
            return ()
        sig = []
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith(".") or not e.is_dir():
                    continue
                try:
                    sig.append((e.name, os.stat(os.path.join(e.path, "run.json")).st_mtime_ns))
                except FileNotFoundError:
                    continue
        return tuple(sorted(sig))

    def runs(self) -> list[dict]:
        """Every run record, sorted by run id; re-reads only records whose file changed. The folder is
        scanned (one stat per run) at most every SCAN_TTL_S: a page and its callbacks share one scan."""
        with self._lock:
            now = time.monotonic()
            if self._sig is not None and now - self._scanned_at < SCAN_TTL_S:
                return [rec for _, rec in self._records.values()]
            sig = self._scan()
            self._scanned_at = now
            if sig != self._sig:
                new = {}
                for name, mtime in sig:
                    cached = self._records.get(name)
                    if cached and cached[0] == mtime:
                        new[name] = cached
                        continue
                    try:
                        rec = self.store.read_run(name)
                    except UserError:
                        rec = None
                    if rec is not None:
                        new[name] = (mtime, rec)
                self._records = new
                self._sig = sig
                self._frame = None
            return [rec for _, rec in self._records.values()]

    def run(self, run_id: str) -> dict | None:
        if not run_id:
            return None
        for rec in self.runs():
            if rec["run_id"] == run_id:
                return rec
        try:
            return self.store.get_run(run_id)
        except UserError:
            return None

    def runs_frame(self) -> pd.DataFrame:
        """One row per run: run_id, sweep_id, status, source, settings.*, metrics.* (cached)."""
        recs = self.runs()
        with self._lock:
            if self._frame is None:
                df = flatten_runs(recs)
                if df.empty:
                    df = pd.DataFrame(columns=["run_id", "sweep_id", "status", "error", "source"])
                self._frame = df
            return self._frame

    def sweeps(self) -> list[str]:
        return sorted({r.get("sweep_id") for r in self.runs() if r.get("sweep_id")})

    def setting_columns(self, df: pd.DataFrame | None = None) -> list[str]:
        df = self.runs_frame() if df is None else df
        return [c for c in df.columns if c.startswith("settings.")]

    # ---- tables ------------------------------------------------------------------------------
    def table(self, run_id: str, name: str) -> pd.DataFrame | None:
        path = self.store.table_path(run_id, name)
        try:
            mtime = path.stat().st_mtime_ns
        except (FileNotFoundError, OSError):
            return None
        key = (run_id, name, mtime)
        with self._lock:
            if key in self._tables:
                self._tables.move_to_end(key)
                return self._tables[key]
        try:
            df = pd.read_parquet(path)
        except Exception:  # a broken table must not take the page down; the run page names it (damaged_tables)
            return None
        with self._lock:
            self._tables[key] = df
            while len(self._tables) > self._table_cache:
                self._tables.popitem(last=False)
        return df

    # ---- aggregates the pages show -------------------------------------------------------
    def breakdown_per_rank(self, run_id: str, step: int | None = None) -> pd.DataFrame | None:
        """ms per step per rank of computing / communication not overlapped / overlapped / free: the stored
        `rank_breakdown` table (median over the rank's steady steps), or one step of `step_breakdown`."""
        if step is None:
            bd = self.table(run_id, "rank_breakdown")
        else:
            bd = self.table(run_id, "step_breakdown")
            bd = bd[bd["step"] == step] if bd is not None and "step" in bd.columns else None
        if bd is None or bd.empty or "rank" not in bd.columns:
            return None
        cols = [c for c in (*(f"{p}_us" for p in STEP_SHARE_PARTS), "step_us") if c in bd.columns]
        out = bd.set_index("rank")[cols] / 1000.0
        out.columns = [c.replace("_us", "_ms") for c in out.columns]
        return out.reset_index()

    def step_times_per_rank(self, run_id: str) -> pd.DataFrame | None:
        ws = self.table(run_id, "workload_steps")
        if ws is None or ws.empty:
            return None
        return ws

    def scaling(self, df: pd.DataFrame | None = None) -> pd.DataFrame:
        """Mean throughput per (other settings, world_size) with its scaling efficiency: the mean over the
        group's runs of perfbench.views.results.scaling_efficiency (the catalogue's one definition: against the
        1-rank runs of the same config_key); ideal = N x the 1-rank baseline throughput."""

        df = self.runs_frame() if df is None else df
        if df.empty or "settings.world_size" not in df.columns or "metrics.throughput" not in df.columns:
            return pd.DataFrame()
        recs = {r["run_id"]: r for r in self.runs()}
        base = baselines(list(recs.values()))
        df = df[df["status"] == "ok"].copy()
        df["metrics.throughput"] = pd.to_numeric(df["metrics.throughput"], errors="coerce")
        df = df.dropna(subset=["metrics.throughput", "settings.world_size"])
        if df.empty:
            return pd.DataFrame()
        df["efficiency"] = [scaling_efficiency(recs[i], base) if i in recs else None for i in df["run_id"]]
        df["baseline"] = [base.get(recs[i].get("config_key")) if i in recs else None for i in df["run_id"]]
        others = [c for c in self.setting_columns(df) if c not in ("settings.world_size", "settings.repeat")]
        others = [c for c in others if df[c].astype(str).nunique() > 1]
        if others:  # vectorised label "key=value, key=value" (row-wise apply is slow with hundreds of runs)
            label = None
            for c in others:
                part = c[9:] + "=" + df[c].astype(str)
                label = part if label is None else label + ", " + part
            df["group"] = label
        else:
            df["group"] = "all runs"
        df["efficiency"] = pd.to_numeric(df["efficiency"], errors="coerce")
        df["baseline"] = pd.to_numeric(df["baseline"], errors="coerce")
        g = df.groupby(["group", "settings.world_size"])
        out = pd.DataFrame(
            {
                "throughput": g["metrics.throughput"].mean(),
                "std": g["metrics.throughput"].std(),
                "repeats": g.size(),
                "efficiency": g["efficiency"].mean(),
                "baseline": g["baseline"].mean(),
            }
        ).reset_index()
        out = out.rename(columns={"settings.world_size": "world_size"})
        out["world_size"] = pd.to_numeric(out["world_size"], errors="coerce")
        out["ideal"] = out["baseline"] * out["world_size"]
        out = out.sort_values(["group", "world_size"]).drop(columns="baseline")
        return out.replace({np.nan: None})

    def predicted_scaling(self, sweep: str | None = None, world_sizes=(1, 2, 4, 8, 16, 32)) -> tuple[pd.DataFrame, str]:
        """perfbench.predict's scaling curve, calibrated on the ok runs of `sweep` (default: the newest sweep):
        per world size the predicted throughput with its interval. Returns (frame, caption); the frame is
        empty and the caption says why when the runs cannot calibrate the model."""

        sweeps = self.sweeps()
        sweep = sweep or (
            max(sweeps, key=lambda s: max(r["run_id"] for r in self.runs() if r.get("sweep_id") == s))
            if sweeps
            else None
        )
        if not sweep:
            return pd.DataFrame(), "no prediction: no sweep in the store"
        key = (
            "predicted",
            sweep,
            tuple(sorted((r["run_id"], r.get("status")) for r in self.runs() if r.get("sweep_id") == sweep)),
        )
        with self._lock:
            if key in self._tables:
                return self._tables[key]
        try:
            cal = calibrate(self.store, [sweep])
            preds = curve(
                cal,
                sorted(
                    set(world_sizes)
                    | {int(r["settings"].get("world_size") or 1) for r in self.runs() if r.get("sweep_id") == sweep}
                ),
            )
        except UserError as exc:
            out = (pd.DataFrame(), f"no prediction for {sweep}: {exc}")
        else:
            rows = [
                {
                    "world_size": p["settings"]["world_size"],
                    "throughput": p["throughput"],
                    "low": p["throughput"] * p["step_time_s"] / p["interval"]["high"],
                    "high": p["throughput"] * p["step_time_s"] / max(p["interval"]["low"], 1e-12),
                    "step_time_s": p["step_time_s"],
                    "scaling_efficiency": p["scaling_efficiency"],
                }
                for p in preds
            ]
            fixed = ", ".join(f"{k}={v}" for k, v in preds[0]["settings"].items() if k != "world_size")
            out = (
                pd.DataFrame(rows),
                f"predicted by `perfbench predict --from {sweep}` ({len(cal.inputs)} runs; {fixed}); "
                "band: the prediction's interval",
            )
        with self._lock:
            self._tables[key] = out
        return out


_DATA: DashData | None = None


def configure(results: str | os.PathLike) -> DashData:
    global _DATA
    _DATA = DashData(results)
    return _DATA


def get() -> DashData:
    if _DATA is None:
        return configure(os.environ.get("PERFBENCH_RESULTS", "perfbench-results"))
    return _DATA
