"""The CLI answers at once: building its parser, `perfbench --help` and every `perfbench COMMAND --help` import none
of the heavy libraries (docs/architecture.md, "Heavy libraries"), and `perfbench ls` reads the store without
pandas or pyarrow (numpy only, for the steadiness rule it marks runs with). Checked on `sys.modules` in a fresh
interpreter, not with a clock."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT

#: the heavy libraries as docs/architecture.md lists them (import names)
HEAVY = ("pandas", "numpy", "pyarrow", "duckdb", "scipy", "mindspore", "torch", "dash", "plotly", "optuna")


def _run(code: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.splitlines()[-1])


LOADED = f"heavy = {HEAVY!r}\nloaded = sorted({{m.split('.')[0] for m in sys.modules}} & set(heavy))\n"


def test_help_of_the_cli_and_of_every_command_imports_no_heavy_library():
    code = (
        "import contextlib, io, json, sys\n"
        "from perfbench.cli import build_parser, command_names, main\n"
        "names = command_names()\n"
        "build_parser()\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    for argv in [['--help']] + [[n, '--help'] for n in names]:\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit:\n"
        "            pass\n"
        + LOADED
        + "print(json.dumps({'names': names, 'loaded': loaded, 'help': out.getvalue()}))\n"
    )
    got = _run(code)
    assert got["loaded"] == []
    # every command was really asked for its help (its own usage line), not stopped at the top parser
    assert len(got["names"]) >= 16 and {"ls", "analyze", "show", "dashboard", "tune"} <= set(got["names"])
    for name in got["names"]:
        assert f"usage: perfbench {name} " in got["help"], name


def test_ls_reads_the_store_without_pandas_or_pyarrow(tmp_path):
    """`ls` reads run records only (perfbench/records.py): a stored run with tables is listed, --json and the
    table, and of the heavy libraries only numpy is imported (analyzers/analyses/steadiness.py, for the ⚠ mark)."""
    run = tmp_path / "res" / "runs" / "sw-ws2-r0"
    (run / "tables").mkdir(parents=True)
    (run / "tables" / "kernels.parquet").write_bytes(b"not read by ls")
    record = {
        "run_id": "sw-ws2-r0",
        "sweep_id": "sw",
        "source": "sweep",
        "status": "ok",
        "error": None,
        "settings": {"workload": "resnet50", "world_size": 2, "repeat": 0},
        "metrics": {"throughput": 123.5, "step_time_s": 0.25},
    }
    (run / "run.json").write_text(json.dumps(record))
    code = (
        "import contextlib, io, json, sys\n"
        "from perfbench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    codes = [main(['ls', '--results', {str(tmp_path / 'res')!r}, '--json']),\n"
        f"             main(['ls', '--results', {str(tmp_path / 'res')!r}])]\n"
        + LOADED
        + "print(json.dumps({'codes': codes, 'loaded': loaded, 'out': out.getvalue()}))\n"
    )
    got = _run(code)
    assert got["codes"] == [0, 0]
    assert got["loaded"] in ([], ["numpy"])
    rows = json.loads(got["out"][: got["out"].index("\n]") + 2])
    assert [(r["run_id"], r["throughput"], r["step_time_s"]) for r in rows] == [("sw-ws2-r0", 123.5, 0.25)]
    table = got["out"].split("\n]")[1]
    assert "│ ws2-r0 │ ok " in table and "│   250.0 │" in table  # step ms: 0.25 s


def test_the_heavy_list_is_the_documented_one():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("## Heavy libraries") :].split("\n## ")[0]
    assert all(f"`{name}`" in section for name in HEAVY)


def test_the_command_ends_without_teardown_yet_keeps_its_output_and_exit_code(tmp_path):
    """`perfbench` ends with os._exit after main (perfbench/cli.py `entry`: pyarrow's thread pools can abort the
    interpreter's teardown). What it printed still reaches a pipe in full, buffered output included, and its exit
    code is main's."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    (tmp_path / "empty").mkdir()

    def perfbench(*argv):
        cmd = [sys.executable, "-m", "perfbench", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)

    r = perfbench("ls", "--results", str(tmp_path / "empty"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = perfbench("ls", "--results", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.startswith("perfbench: error: ") and "Traceback" not in r.stderr
