"""analyzers.parsers.ascend.common.read_plain_csv: the pandas-free read of a regular profiler CSV (the memory
files of every rank), and the irregular files it leaves to read_csv. Expected values written by hand."""

from __future__ import annotations

import math

from analyzers.parsers.ascend.common import read_plain_csv

REQ = {"Component": "component", "Timestamp(us)": "ts_us"}
OPT = {"Total Allocated(MB)": "allocated_mb", "Device Type": "device"}
NUM = ("ts_us", "allocated_mb")


def _read(tmp_path, text: str):
    p = tmp_path / "memory_record.csv"
    p.write_text(text)
    return read_plain_csv(p, REQ, OPT, NUM)


def test_plain_file_trailing_tabs_empty_cells_and_skipped_columns(tmp_path):
    cols = _read(
        tmp_path,
        "Component,Timestamp(us),Total Allocated(MB),Stream Ptr,Device Type\n"
        "APP,1736408883613934.920\t,,7,NPU:0\n"
        " PTA+GE,12.5,1188.1064453125,7,NPU:0\n",
    )
    assert list(cols) == ["component", "ts_us", "allocated_mb", "device"]  # Stream Ptr is not wanted
    assert cols["component"] == ["APP", " PTA+GE"]  # text as written (the memory reader strips components)
    # correctly rounded: .920 lies nearer 935.0 than 934.75 (the doubles 0.25 apart at this size)
    assert cols["ts_us"] == [1736408883613935.0, 12.5]
    assert math.isnan(cols["allocated_mb"][0]) and cols["allocated_mb"][1] == 1188.1064453125
    assert cols["device"] == ["NPU:0", "NPU:0"]


def test_irregular_files_are_left_to_read_csv(tmp_path):
    head = "Component,Timestamp(us),Total Allocated(MB),Device Type\n"
    assert _read(tmp_path, head + "APP,1.0,2.0\n") is None  # a row of another width (a cut last line)
    assert _read(tmp_path, head + "APP,1.0,2.0x,NPU:0\n") is None  # not a number
    assert _read(tmp_path, head + "APP,1_0,2.0,NPU:0\n") is None  # float() would take it, pandas would not
    assert _read(tmp_path, head + ",1.0,2.0,NPU:0\n") is None  # an empty text cell
    assert _read(tmp_path, head) is None  # no data row
    assert _read(tmp_path, "Component,Total Allocated(MB)\nAPP,2.0\n") is None  # a required column missing
    assert _read(tmp_path, "Component,Component,Timestamp(us)\nA,B,1.0\n") is None  # a header twice


def test_columnar_read_bom_quotes_and_arrow_text(tmp_path):
    from analyzers.parsers.ascend.common import read_columnar_csv

    p = tmp_path / "memory_record.csv"
    p.write_bytes(
        "\ufeffComponent,Timestamp(us),Total Allocated(MB),Device Type\n"
        '"PTA,GE",1736408883613934.920\t,N/A,NPU:0\n'
        "APP,0.1,3,NPU:0\n".encode()
    )
    cols = read_columnar_csv(p, REQ, OPT, NUM)
    assert list(cols["component"]) == ["PTA,GE", "APP"]  # a quoted comma stays in the cell; the BOM is dropped
    assert list(cols["ts_us"]) == [1736408883613935.0, 0.1]  # correctly rounded, as float() gives
    assert math.isnan(cols["allocated_mb"][0]) and cols["allocated_mb"][1] == 3.0
    text = read_columnar_csv(p, REQ, OPT, NUM, arrow_text=True)["component"]
    assert text.to_pylist() == ["PTA,GE", "APP"]
