"""`perfbench mindinsight [--results DIR] [--port 8080]`: open the runs' MindSpore summary files (loss,
step time, throughput per step) in MindInsight 2.3.1. MindInsight runs from its own environment, created on
first use (~/.cache/perfbench/mindinsight-venv, or $PERFBENCH_MINDINSIGHT_VENV), because it pins protobuf 3.x
and MindSpore 2.10 needs a newer one. Binds 127.0.0.1; Ctrl-C stops it."""

from __future__ import annotations

import json
import sys
import time

from perfbench.cli import add_json_arg, add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "mindinsight", help="open the runs' summaries in MindInsight (own environment)", description=__doc__
    )
    add_results_arg(p)
    p.add_argument("--port", type=int, default=8080, help="MindInsight port (default 8080)")
    p.add_argument(
        "--list",
        action="store_true",
        help="start, print the train jobs MindInsight lists, stop (exit 1 if a run is missing)",
    )
    p.add_argument("--setup-only", action="store_true", help="only create the MindInsight environment")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from perfbench.run.mindinsight import MindInsight, ensure_venv
    from perfbench.store import Store

    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if not (0 < args.port < 65536):
        raise UserError(f"bad --port {args.port}")
    if args.setup_only:
        print(ensure_venv(log=log))
        return 0
    store = Store(args.results, create=False)
    mi = MindInsight(store, port=args.port, log=log)
    try:
        mi.start()
        jobs = mi.wait_for_jobs(mi.dirs, timeout=60)
        listed = {j["train_id"].removeprefix("./") for j in jobs}
        missing = sorted(set(mi.dirs) - listed)
        if args.json:
            print(
                json.dumps(
                    {
                        "url": mi.url(),
                        "train_jobs": [
                            {"train_id": j["train_id"], "scalars": (j.get("plugins") or {}).get("scalar", [])}
                            for j in jobs
                        ],
                        "missing": missing,
                    },
                    indent=2,
                )
            )
        else:
            print(f"MindInsight {mi.url()} lists {len(listed)} of {len(mi.dirs)} run(s) with summaries:")
            for j in jobs:
                print(f"  {j['train_id'][2:]}  scalars: {', '.join((j.get('plugins') or {}).get('scalar', []))}")
            for m in missing:
                print(f"  MISSING: {m}")
        if args.list:
            return 1 if missing else 0
        print("Ctrl-C stops MindInsight.", file=sys.stderr)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        mi.stop()
