"""Typed readers for the PhysioNet tables described in ``schema.TABLES`` (file access: ``files``).

Three levels, all lazy until the caller collects:

- ``scan_raw`` (``files``): every column as String, header checked eagerly, gzip integrity verified once per
  file version. One bad value can never abort a scan at this level.
- ``scan_table``: typed per the schema, plus ``_row`` (1-based data row) and ``_parse_error``
  (``"column='raw'"`` for the first column whose non-empty value did not parse, else null). Ingestion
  uses it to keep good rows and quarantine bad ones.
- ``read_table``: strict and eager; raises ``SourceError`` on the first bad value.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from .errors import SourceError
from .layout import as_layout
from .files import (_FIX_REDOWNLOAD, LARGE_GZIP_BYTES, candidates, quoting, read_header, relative, resolve, file_label,
                    scan_raw, source_file, verify_gzip)
from .schema import DATE_FORMAT, DATETIME_FORMAT, SourceFile

__all__ = [
    "LARGE_GZIP_BYTES", "PARSE_ERROR", "POLARS_TYPES", "ROW", "TYPE_DESCRIPTIONS", "candidates", "cxr_study_datetime",
    "parse_error_expr", "parse_expr", "parse_failed", "read_failure", "read_header", "read_table", "relative",
    "quoting", "resolve", "file_label", "scan_raw", "scan_table", "source_file", "verify_gzip",
]
# Datetime columns accept "YYYY-MM-DD HH:MM:SS", with optional fractional seconds, or a bare date.
_DATETIME_FORMATS = ("%Y-%m-%d %H:%M:%S%.f", DATE_FORMAT)
TYPE_DESCRIPTIONS = {
    "int": "an integer",
    "float": "a number",
    "datetime": "a date-time (YYYY-MM-DD HH:MM:SS)",
    "date": "a date (YYYY-MM-DD)",
    "str": "text",
}
POLARS_TYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "datetime": pl.Datetime("us"),
                "date": pl.Date}
ROW = "_row"
PARSE_ERROR = "_parse_error"


def _parse(text: pl.Expr, type_: str, fast: bool) -> pl.Expr:
    if type_ == "int":
        return text.str.to_integer(strict=False)
    if type_ == "float":
        return text.cast(pl.Float64, strict=False)
    if type_ == "date":
        return text.str.strptime(pl.Date, DATE_FORMAT, strict=False)
    if type_ == "datetime":
        if fast:  # the exact MIMIC format takes polars' fast path
            return text.str.strptime(pl.Datetime("us"), DATETIME_FORMAT, strict=False)
        return pl.coalesce([text.str.strptime(pl.Datetime("us"), fmt, strict=False) for fmt in _DATETIME_FORMATS])
    raise ValueError(f"unknown column type {type_!r}")


def parse_expr(column: str, type_: str) -> pl.Expr:
    """Expression turning the raw String column into its schema type (null when it does not parse).

    Values are parsed as written first; only those that fail are retried with surrounding whitespace
    removed and, for datetimes, with fractional seconds or a bare date. The retry sees nulls elsewhere,
    which keeps the common case at the speed of a single strict parse.
    """
    raw = pl.col(column)
    if type_ == "str":
        return raw
    first = _parse(raw, type_, fast=True)
    retry = pl.when(first.is_null()).then(raw.str.strip_chars())
    return pl.coalesce(first, _parse(retry, type_, fast=False))


def parse_failed(column: str, type_: str) -> pl.Expr:
    """True where the raw value is non-empty but does not parse as ``type_``."""
    if type_ == "str":
        return pl.lit(False)
    return ((pl.col(column).str.strip_chars() != "") & parse_expr(column, type_).is_null()).fill_null(False)


def parse_error_expr(sf: SourceFile, columns: list[str]) -> pl.Expr:
    """``"column='raw'"`` for the first of ``columns`` (raw Strings) whose value does not parse, else null."""
    types = sf.types
    errors = [(c, parse_failed(c, types[c])) for c in columns if types[c] != "str"]
    if not errors:
        return pl.lit(None, pl.String).alias(PARSE_ERROR)
    chain = pl.when(errors[0][1]).then(pl.lit(f"{errors[0][0]}='") + pl.col(errors[0][0]) + pl.lit("'"))
    for c, failed in errors[1:]:
        chain = chain.when(failed).then(pl.lit(f"{c}='") + pl.col(c) + pl.lit("'"))
    return chain.otherwise(pl.lit(None, pl.String)).alias(PARSE_ERROR)


def _typed(lf: pl.LazyFrame, sf: SourceFile, columns: list[str]) -> pl.LazyFrame:
    types = sf.types
    return lf.select(
        *[parse_expr(c, types[c]).alias(c) for c in columns],
        pl.col(ROW).cast(pl.Int64),
        parse_error_expr(sf, columns),
    )


def _columns(root: Path, sf: SourceFile, columns: list[str] | None) -> list[str]:
    header = read_header(root, sf.name)
    if columns is None:
        return [c for c in header if c in sf.types]
    unknown = [c for c in columns if c not in sf.types]
    if unknown:
        raise ValueError(f"{sf.name} has no column(s) {unknown} in the schema")
    absent = [c for c in columns if c not in header]
    if absent:
        raise SourceError(file_label(root, sf.name),
                          f"column '{absent[0]}' is not in the file", column=absent[0],
                          fix="use the full PhysioNet release file, which has every column")
    return list(columns)


def scan_table(root: Path, name: str, cache_dir: Path | None = None, *,
               columns: list[str] | None = None) -> pl.LazyFrame:
    """Lazy typed scan: the schema columns present in the file (file order) plus ``_row``, ``_parse_error``.

    Types: int -> Int64, float -> Float64, str -> String, datetime -> Datetime("us"), date -> Date.
    A non-empty value that does not parse becomes null and is named in ``_parse_error``. Damage that
    only shows while streaming (a row with extra fields, broken quoting) raises a polars error at collect
    time; ``read_failure(root, name, exc)`` turns it into a ``SourceError``.
    """
    sf = source_file(name)
    root = as_layout(root)
    cols = _columns(root, sf, columns)
    return _typed(scan_raw(root, name, cache_dir, row_index_name=ROW), sf, cols)


def read_failure(root: Path, name: str, exc: Exception) -> SourceError:
    """The ``SourceError`` for a file polars cannot parse (ragged rows, broken quoting, bad gzip)."""
    sf = source_file(name)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    kind = "TSV" if sf.sep == "\t" else "CSV"
    mode = quoting(root, name)
    if mode.literal:  # the standard reading failed as well: the file needs both
        first += f"; {mode.reason}, and read so it fails too"
    return SourceError(file_label(root, name), f"cannot be read as {kind} ({first})",
                       fix=_FIX_REDOWNLOAD.replace("; 'gzip -t FILE' confirms the damage", "")
                       + "; rows with a wrong number of fields or broken quoting are the usual cause")


def read_table(root: Path, name: str, columns: list[str] | None = None,
               cache_dir: Path | None = None) -> pl.DataFrame:
    """Strict eager read: typed columns, or ``SourceError`` naming the first value that does not parse."""
    sf = source_file(name)
    root = as_layout(root)
    lf = scan_table(root, name, cache_dir, columns=columns)
    try:
        df = lf.collect(engine="streaming")
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise read_failure(root, name, exc) from None
    bad = df.filter(pl.col(PARSE_ERROR).is_not_null())
    if bad.height:
        column, _, value = bad[PARSE_ERROR][0].partition("='")
        raise SourceError(
            file_label(root, name),
            f"column '{column}' has a value that is not {TYPE_DESCRIPTIONS[sf.types[column]]}",
            column=column, row=int(bad[ROW][0]), value=value[:-1], count=bad.height,
            fix=f"re-download the file from PhysioNet; if it was edited, make every '{column}' value "
                f"{TYPE_DESCRIPTIONS[sf.types[column]]} or empty")
    return df.drop(ROW, PARSE_ERROR)


def cxr_study_datetime(study_date: str | pl.Expr = "StudyDate",
                       study_time: str | pl.Expr = "StudyTime") -> pl.Expr:
    """Datetime("us") from MIMIC-CXR ``StudyDate`` (int YYYYMMDD) and ``StudyTime`` (float HHMMSS.fff).

    The time is read zero-padded to millisecond precision (1234.5 -> 00:12:34.500), as the published
    builders format it; impossible dates or times (month 13, hour 24, negative) give null.
    """
    d = pl.col(study_date) if isinstance(study_date, str) else study_date
    t = pl.col(study_time) if isinstance(study_time, str) else study_time
    day = d.cast(pl.Int64).cast(pl.String).str.zfill(8).str.strptime(pl.Date, "%Y%m%d", strict=False)
    ms = (t.cast(pl.Float64) * 1000).round(0).cast(pl.Int64, strict=False)
    hh, mm, ss_ms = ms // 10_000_000, (ms // 100_000) % 100, ms % 100_000
    valid = (ms >= 0) & (hh < 24) & (mm < 60) & (ss_ms < 60_000)
    offset = pl.duration(milliseconds=hh * 3_600_000 + mm * 60_000 + ss_ms)
    return pl.when(valid).then(day.cast(pl.Datetime("us")) + offset).otherwise(None)
