"""The JSON document written a top-level key at a time (`analyze --json` at thousands of ranks) is the same text
as the whole document dumped at once. Expected text written out by hand."""

from __future__ import annotations

import io

from analyzers.report import dumps_bytes, write_document

DOC = {"a": 1, "b": [1.5, {"c": "x\ny"}], "d": {}, "e": None}
#: orjson's two-space indentation, by hand
TEXT = b"""{
  "a": 1,
  "b": [
    1.5,
    {
      "c": "x\\ny"
    }
  ],
  "d": {},
  "e": null
}
"""


def test_written_a_key_at_a_time_it_is_the_whole_document():
    out = io.BytesIO()
    write_document(DOC, out)
    assert out.getvalue() == TEXT == dumps_bytes(DOC, newline=True)


def test_an_empty_document_is_one_empty_object():
    out = io.BytesIO()
    write_document({}, out)
    assert out.getvalue() == b"{}\n"
