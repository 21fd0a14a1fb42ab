"""`perfbench dashboard [--results DIR] [--port P] [--host H]`: browse runs, sweeps, scaling and
comparisons in a Dash app (read-only over the store). Binds 127.0.0.1 unless --host says otherwise."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from perfbench.cli import add_results_arg
from perfbench.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser("dashboard", help="open the Dash dashboard over a results folder", description=__doc__)
    add_results_arg(p)
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; anything else exposes your results to the network)",
    )
    p.add_argument("--debug", action="store_true", help="Dash debug mode (reloader off)")
    p.set_defaults(func=run)


def run(args) -> int:
    if not (0 < args.port < 65536):
        raise UserError(f"bad --port {args.port}")
    if not Path(args.results).is_dir():
        raise UserError(
            f"no results at {args.results} (run `perfbench sweep CONFIG` or `perfbench analyze PATH` first)"
        )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"perfbench: warning: binding {args.host}: anyone who can reach this address can read the results "
            "(the dashboard has no authentication)",
            file=sys.stderr,
        )
    with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as s:
        try:
            s.bind((args.host, args.port))
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    from dashboards.app import serve

    print(
        f"perfbench dashboard on http://{args.host}:{args.port}/ (results: {args.results}); Ctrl-C stops it",
        file=sys.stderr,
    )
    serve(args.results, host=args.host, port=args.port, debug=args.debug)
    return 0
