"""Script msrun runs for every rank: ``entry.py --config run_config.json`` (see docs/architecture.md).

Dispatches on the config's ``workload`` key through :func:`workloads.runner.main`.
"""

import time

ENTRY_TS = time.time()  # first line this rank runs (its start-up timeline: docs/tune.md)

import os  # noqa: E402
import sys  # noqa: E402

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from workloads.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(entry_ts=ENTRY_TS))
