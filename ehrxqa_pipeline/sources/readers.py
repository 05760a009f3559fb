"""Readers for the PhysioNet tables described in ``schema.TABLES``.

Three levels, all lazy until the caller collects:

- ``scan_raw``: every column as String, header checked eagerly, gzip integrity verified once per file
  version. One bad value can never abort a scan at this level.
- ``scan_table``: typed per the schema, plus ``_row`` (1-based data row) and ``_parse_error``
  (``"column='raw'"`` for the first column whose non-empty value did not parse, else null). Ingestion
  uses it to keep good rows and quarantine bad ones.
- ``read_table``: strict and eager; raises ``SourceError`` on the first bad value.

File choice: when both ``PATH`` and ``PATH.gz`` exist, the plain file wins (the published builders read
the uncompressed files, and a plain file scans without decompression); the validator warns about it.

Large gzip files (over ``LARGE_GZIP_BYTES`` compressed) are decompressed once into ``cache_dir`` when one
is given, so repeated scans read a memory-mapped plain copy; the copy is keyed by path, size and mtime.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
import uuid
import zlib
from pathlib import Path

import polars as pl

from .errors import SourceError
from .schema import DATE_FORMAT, DATETIME_FORMAT, TABLES, SourceFile

LARGE_GZIP_BYTES = 64 * 1024 * 1024
_CHUNK = 4 * 1024 * 1024
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

# (absolute path, size, mtime_ns) of gzip files already verified in this process.
_verified: set[tuple[str, int, int]] = set()

_FIX_ROOT = ("check that EHRXQA_SOURCE_ROOT points at the PhysioNet root (the folder holding mimiciv/, "
             "mimic-cxr-jpg/ and chest-imagenome/) and that the file was downloaded")
_FIX_ACCESS = "check that the file is readable by this user and the disk is healthy"
# What a damaged gzip stream raises (BadGzipFile also covers CRC and length mismatches).
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)
_FIX_REDOWNLOAD = ("re-download the file from PhysioNet (then compare it with the release's SHA256SUMS.txt); "
                   "'gzip -t FILE' confirms the damage")


def source_file(name: str) -> SourceFile:
    try:
        return TABLES[name]
    except KeyError:
        raise ValueError(f"unknown source table {name!r}; known: {', '.join(TABLES)}") from None


def relative(root: Path, path: Path) -> str:
    """``path`` as it is named in messages: relative to the source root when below it."""
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def candidates(sf: SourceFile) -> tuple[str, ...]:
    """Relative paths accepted for a table, in order of preference."""
    return (sf.path, sf.path + ".gz") if sf.gzip_ok else (sf.path,)


def resolve(root: Path, name: str) -> Path:
    """The existing file for table ``name``: ``PATH`` if present, else ``PATH.gz`` (when gzip is allowed)."""
    sf = source_file(name)
    root = Path(root)
    for rel in candidates(sf):
        path = root / rel
        if path.is_file():
            return path
    expected = " or ".join(candidates(sf))
    raise SourceError(sf.path + ("[.gz]" if sf.gzip_ok else ""),
                      f"file not found (expected {expected} under {root})", fix=_FIX_ROOT)


def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def read_header(root: Path, name: str) -> list[str]:
    """Column names of the file for ``name``, checked: every required column must be present."""
    sf = source_file(name)
    path = resolve(root, name)
    rel = relative(root, path)
    try:
        with _open_text(path) as fh:
            header = next(csv.reader(fh, delimiter=sf.sep), None)
    except _GZIP_ERRORS as exc:
        raise SourceError(rel, f"truncated or corrupt gzip ({exc})", fix=_FIX_REDOWNLOAD) from None
    except OSError as exc:
        raise SourceError(rel, f"cannot be read ({exc.strerror or exc})", fix=_FIX_ACCESS) from None
    if not header:
        raise SourceError(rel, "file is empty (no header line)", fix=_FIX_REDOWNLOAD)
    header[0] = header[0].removeprefix("\ufeff")
    missing = [c for c in sf.required if c not in header]
    if missing:
        shown = ", ".join(header)
        shown = shown if len(shown) <= 200 else shown[:197] + "..."
        names = ", ".join(f"'{c}'" for c in missing)
        what = f"required column {names} is" if len(missing) == 1 else f"required columns {names} are"
        sep_hint = ""
        if len(header) == 1 and (("\t" if sf.sep == "," else ",") in header[0]):
            sep_hint = f"; the separator looks wrong (expected {'a tab' if sf.sep == chr(9) else 'a comma'})"
        raise SourceError(
            rel, f"{what} missing from the header (the header has: {shown})", column=", ".join(missing),
            fix=f"use the unmodified PhysioNet file, whose header starts {', '.join(sf.header[:4])}, ...{sep_hint}")
    return header


def verify_gzip(path: Path, root: Path | None = None, copy_to: Path | None = None) -> None:
    """Decompress ``path`` as a stream (optionally into ``copy_to``) to prove it is complete and intact."""
    rel = relative(root, path) if root is not None else str(path)

    def cache_failure(exc: OSError) -> SourceError:
        return SourceError(rel, f"cannot write its decompressed copy {copy_to} ({exc.strerror or exc})",
                           fix="free disk space in the cache folder, make it writable, or point the cache elsewhere")

    try:
        dst = open(copy_to, "wb") if copy_to is not None else None
    except OSError as exc:
        raise cache_failure(exc) from None
    try:
        with gzip.open(path, "rb") as src:
            while block := src.read(_CHUNK):
                if dst is not None:
                    try:
                        dst.write(block)
                    except OSError as exc:
                        raise cache_failure(exc) from None
    except _GZIP_ERRORS as exc:
        raise SourceError(rel, f"truncated or corrupt gzip ({exc})", fix=_FIX_REDOWNLOAD) from None
    except OSError as exc:
        raise SourceError(rel, f"cannot be read ({exc.strerror or exc})", fix=_FIX_ACCESS) from None
    finally:
        if dst is not None:
            try:
                dst.close()  # flushes the last block
            except OSError as exc:
                raise cache_failure(exc) from None


def _state(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _cached_plain(root: Path, path: Path, cache_dir: Path) -> Path:
    """A verified plain copy of a gzip file in ``cache_dir`` (made once per path + size + mtime)."""
    state = _state(path)
    path_key = hashlib.sha256(state[0].encode()).hexdigest()[:16]
    state_key = hashlib.sha256(f"{state[1]}:{state[2]}".encode()).hexdigest()[:12]
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{path_key}-{state_key}-{path.name.removesuffix('.gz')}"
    if target.is_file():
        return target
    tmp = cache_dir / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        verify_gzip(path, root, copy_to=tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _verified.add(state)
    for stale in cache_dir.glob(f"{path_key}-*"):  # older copies of the same file
        if stale != target:
            stale.unlink(missing_ok=True)
    return target


def scan_raw(root: Path, name: str, cache_dir: Path | None = None, *,
             row_index_name: str | None = None) -> pl.LazyFrame:
    """Lazy scan of table ``name`` with every column as String (empty strings are null).

    The header is validated eagerly; a gzip file is verified by a streaming decompression the first
    time this process sees that version of it. ``row_index_name`` adds a 1-based UInt row number.
    """
    sf = source_file(name)
    root = Path(root)
    read_header(root, name)
    path = resolve(root, name)
    if path.name.endswith(".gz"):
        if cache_dir is not None and path.stat().st_size > LARGE_GZIP_BYTES:
            path = _cached_plain(root, path, Path(cache_dir))
        else:
            state = _state(path)
            if state not in _verified:
                verify_gzip(path, root)
                _verified.add(state)
    return pl.scan_csv(path, separator=sf.sep, infer_schema=False, encoding="utf8-lossy",
                       row_index_name=row_index_name, row_index_offset=1)


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


def _typed(lf: pl.LazyFrame, sf: SourceFile, columns: list[str]) -> pl.LazyFrame:
    types = sf.types
    errors = [(c, parse_failed(c, types[c])) for c in columns if types[c] != "str"]
    if errors:
        chain = pl.when(errors[0][1]).then(pl.lit(f"{errors[0][0]}='") + pl.col(errors[0][0]) + pl.lit("'"))
        for c, failed in errors[1:]:
            chain = chain.when(failed).then(pl.lit(f"{c}='") + pl.col(c) + pl.lit("'"))
        error_expr = chain.otherwise(pl.lit(None, pl.String))
    else:
        error_expr = pl.lit(None, pl.String)
    return lf.select(
        *[parse_expr(c, types[c]).alias(c) for c in columns],
        pl.col(ROW).cast(pl.Int64),
        error_expr.alias(PARSE_ERROR),
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
        raise SourceError(relative(root, resolve(root, sf.name)),
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
    root = Path(root)
    cols = _columns(root, sf, columns)
    return _typed(scan_raw(root, name, cache_dir, row_index_name=ROW), sf, cols)


def read_failure(root: Path, name: str, exc: Exception) -> SourceError:
    """The ``SourceError`` for a file polars cannot parse (ragged rows, broken quoting, bad gzip)."""
    sf = source_file(name)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    kind = "TSV" if sf.sep == "\t" else "CSV"
    return SourceError(relative(root, resolve(root, name)), f"cannot be read as {kind} ({first})",
                       fix=_FIX_REDOWNLOAD.replace("; 'gzip -t FILE' confirms the damage", "")
                       + "; rows with a wrong number of fields or broken quoting are the usual cause")


def read_table(root: Path, name: str, columns: list[str] | None = None,
               cache_dir: Path | None = None) -> pl.DataFrame:
    """Strict eager read: typed columns, or ``SourceError`` naming the first value that does not parse."""
    sf = source_file(name)
    root = Path(root)
    lf = scan_table(root, name, cache_dir, columns=columns)
    try:
        df = lf.collect(engine="streaming")
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise read_failure(root, name, exc) from None
    bad = df.filter(pl.col(PARSE_ERROR).is_not_null())
    if bad.height:
        column, _, value = bad[PARSE_ERROR][0].partition("='")
        raise SourceError(
            relative(root, resolve(root, name)),
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


__all__ = [
    "LARGE_GZIP_BYTES", "PARSE_ERROR", "POLARS_TYPES", "ROW", "TYPE_DESCRIPTIONS", "candidates", "cxr_study_datetime",
    "parse_expr", "parse_failed", "read_failure", "read_header", "read_table", "relative", "resolve", "scan_raw",
    "scan_table", "source_file", "verify_gzip",
]
