"""The `perfbench` command. Each sub-command lives in its own module under perfbench/commands/
and exposes `register(subparsers)`; modules are discovered, so adding a command touches no other file.
Command modules import only light modules at their top and their implementation in `run()`, so building the
parser imports none of the heavy libraries (docs/architecture.md, "Heavy libraries and the CLI's start-up")."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from perfbench import __version__
from perfbench.errors import UserError

DEFAULT_RESULTS = "perfbench-results"


def add_results_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        default=DEFAULT_RESULTS,
        metavar="DIR",
        help=f"results directory holding the store (default: ./{DEFAULT_RESULTS})",
    )


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")


def command_names() -> list[str]:
    """The sub-commands: one module each under perfbench/commands/, found by file name (nothing imported; a
    directory listing instead of pkgutil, which imports inspect)."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "commands")
    return sorted(n[:-3] for n in os.listdir(here) if n.endswith(".py") and not n.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the command `only` alone (what `main` builds when the command line names
    one: the other command modules are not even imported)."""
    parser = argparse.ArgumentParser(
        prog="perfbench",
        description=(
            "Profile and tune distributed MindSpore training: sweep parallel settings through msrun, "
            "analyze CPU and Ascend profiler output, compare runs, gate regressions in CI, browse a dashboard."
        ),
        epilog="Run `perfbench COMMAND --help` for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"perfbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [only] if only else command_names():  # each is light (docs/architecture.md, "Heavy libraries")
        module = importlib.import_module(f"perfbench.commands.{name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    named = next((a for a in argv if not a.startswith("-")), None)  # the top level has no option with a value
    parser = build_parser(only=named if named in command_names() else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    debug = bool(os.environ.get("PERFBENCH_DEBUG"))
    try:
        code = args.func(args)
    except UserError as exc:
        if debug:
            raise
        print(f"perfbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # permissions, full disk, missing files outside our checks
        if debug:
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(
            f"perfbench: error: {exc.strerror or exc}{where}  [set PERFBENCH_DEBUG=1 for a traceback]", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        print("perfbench: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


def entry() -> None:
    """The `perfbench` command: `main`, then the process ends without the interpreter's teardown. pyarrow's native
    thread pools can abort that teardown at random ("terminate called without an active exception", exit -6, about
    one exit in 30 here; apache/arrow#34314, #39862), which would turn a clean exit into a crash. Exit handlers run
    and the output is flushed first, so nothing written is lost."""
    code = main()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`perfbench ls | head`): nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()
