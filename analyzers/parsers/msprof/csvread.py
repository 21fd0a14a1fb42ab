"""Tolerant, strict-where-it-matters CSV reading shared by the msprof and legacy MindSpore parsers.

* Headers are matched by name (surrounding spaces/TABs stripped), never by position; extra columns
  are kept; a missing *required* column is a `ProfileFormatError` naming the file and the column.
  `aliases` maps a canonical name to the spellings different versions use (`Block Dim` / `Block Num`).
* Cells are read as text and stripped of spaces and TABs (msprof writes `1787504054381431.513\\t`,
  sometimes inside the quotes). `N/A`, `NA`, `-` and empty cells become NaN in numeric columns.
* A row with fewer fields than the header (a file cut short) or more (corrupt), a file whose last line
  has no line break (cut, maybe inside a value that still parses), or one that ends inside the header is
  an error naming the file and the line; so is a value in a required numeric column that is not a number.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfbench.errors import ProfileFormatError

NA_STRINGS = {"", "N/A", "NA", "n/a", "NULL", "null", "None", "nan", "NaN"}

csv.field_size_limit(1 << 30)


def _clean(s: str) -> str:
    s = s.strip(" \t\r\n\ufeff")
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        # msprof triple-quotes shape cells ("""512,16""" -> "512,16" after CSV unquoting)
        s = s[1:-1].strip(" \t")
    return s


def read_table(
    path: str | Path,
    required: list[str] = (),
    *,
    aliases: dict[str, list[str]] | None = None,
    numeric: list[str] = (),
    what: str = "CSV file",
) -> pd.DataFrame:
    """Read one CSV file into a DataFrame of stripped strings (numeric columns converted).

    `required`: canonical column names that must be present (after applying `aliases`).
    `numeric`: canonical columns converted to float (NaN for N/A); for required ones a non-number
    is an error.
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            text = fh.read()
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except UnicodeDecodeError:
        raise ProfileFormatError(path, f"not a text {what} (undecodable bytes)") from None
    except csv.Error as exc:
        raise ProfileFormatError(path, f"malformed {what}: {exc}") from None
    except OSError as exc:
        raise ProfileFormatError(path, f"cannot read file ({exc.strerror})") from None
    if not rows or not any(_clean(c) for c in rows[0]):
        raise ProfileFormatError(path, f"file is empty, expected a {what} with a header line")
    if text and not text.endswith(("\n", "\r")):
        # msprof and MindSpore write every line with its line break: a missing last one means the
        # file was cut, possibly inside a value that still parses
        if len(rows) == 1:
            raise ProfileFormatError(path, f"file ends inside the header line (truncated {what}?)")
        raise ProfileFormatError(path, f"line {len(rows)} has no line break at the end of the file (truncated {what}?)")
    header = [_clean(c) for c in rows[0]]
    # trailing empty header cells (a trailing comma) are not columns
    while header and header[-1] == "":
        header.pop()
    n = len(header)
    body = []
    for i, row in enumerate(rows[1:], start=2):
        if not row or (len(row) == 1 and not _clean(row[0])):
            continue  # blank line
        if len(row) > n:
            extra = row[n:]
            if any(_clean(c) for c in extra):
                raise ProfileFormatError(
                    path, f"line {i} has {len(row)} fields but the header has {n} (corrupt {what})"
                )
            row = row[:n]
        if len(row) < n:
            raise ProfileFormatError(
                path, f"line {i} has {len(row)} fields but the header has {n} (file truncated or corrupt)"
            )
        body.append([_clean(c) for c in row])
    df = pd.DataFrame(body, columns=header, dtype=object) if body else pd.DataFrame(columns=header, dtype=object)
    if df.columns.duplicated().any():
        df = df.loc[:, ~df.columns.duplicated()]
    # aliases -> canonical names
    for canon, names in (aliases or {}).items():
        if canon in df.columns:
            continue
        for alt in names:
            if alt in df.columns:
                df = df.rename(columns={alt: canon})
                break
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ProfileFormatError(
            path,
            f"required column {missing[0]!r} is missing (header: {', '.join(header[:12])}{' ...' if n > 12 else ''})",
        )
    req = set(required)
    for col in numeric:
        if col not in df.columns:
            continue
        df[col] = to_number(df[col], path=path, column=col, strict=col in req)
    return df


_NUM_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def to_number(s: pd.Series, *, path=None, column: str = "", strict: bool = False) -> pd.Series:
    """Strings -> float; N/A-like cells -> NaN. With `strict`, any other non-number is an error."""
    txt = s.astype(str).str.strip(' \t\r\n"')
    na = txt.isin(NA_STRINGS) | (txt == "-")
    out = pd.to_numeric(txt.where(~na, None), errors="coerce")
    bad = out.isna() & ~na
    if strict and bad.any():
        idx = int(np.flatnonzero(bad.to_numpy())[0])
        raise ProfileFormatError(path, f"column {column!r} row {idx + 1}: {txt.iloc[idx][:40]!r} is not a number")
    return out.astype("float64")


def to_numbers(
    df: pd.DataFrame, cols: list[str], *, path=None, strict: tuple | list | set = ()
) -> dict[str, pd.Series]:
    """Many string columns -> float arrays in one vectorized pass (wide files have 1000+ columns)."""
    cols = [c for c in cols if c in df.columns]
    if not cols:
        return {}
    block = pd.Series(df[cols].to_numpy(dtype=object).ravel(order="F"))
    txt = block.astype(str).str.strip(' \t\r\n"')
    na = txt.isin(NA_STRINGS) | (txt == "-")
    vals = pd.to_numeric(txt.where(~na, None), errors="coerce").to_numpy(dtype=float)
    bad = np.isnan(vals) & ~na.to_numpy()
    n = len(df)
    out = {}
    for j, c in enumerate(cols):
        v = vals[j * n : (j + 1) * n]
        if c in strict and bad[j * n : (j + 1) * n].any():
            idx = int(np.flatnonzero(bad[j * n : (j + 1) * n])[0])
            raise ProfileFormatError(
                path, f"column {c!r} row {idx + 1}: {txt.iloc[j * n + idx][:40]!r} is not a number"
            )
        out[c] = pd.Series(v, index=df.index)
    return out
