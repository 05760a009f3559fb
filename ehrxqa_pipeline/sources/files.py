"""File access for the PhysioNet tables of ``schema.TABLES``: which file, its header, its gzip integrity,
and an untyped lazy scan (``scan_raw``).

File choice: when both ``PATH`` and ``PATH.gz`` exist, the plain file wins (the published builders read
the uncompressed files, and a plain file scans without decompression); the validator warns about it.

Large gzip files (over ``LARGE_GZIP_BYTES`` compressed) are decompressed once into ``cache_dir`` when one
is given, so repeated scans read a memory-mapped plain copy; the copy is keyed by path and ``hashing.stat_key``.

Quotes in the tab-separated files (Chest ImaGenome): a field may begin with a quote that does not quote it
(``"clear" lungs``), which the published reader (pandas) accepts and polars' standard reading refuses,
while a field written by pandas' ``to_csv`` is properly quoted (``"the ""clear"" lungs"``, or one holding
a tab) and needs quote handling. ``quoting`` decides per file version: standard quoting when no field
starts with a quote or when the whole file parses with it, else quotes as ordinary characters
(``Quoting.literal``, with the reason; the validator and ingestion report it). A file that needs both
fails to read, naming the file.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import mmap
import os
import re
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from . import scene_graph
from ehrxqa_pipeline.hashing import stat_key

from .errors import SourceError
from .layout import SourceLayout, as_layout
from .schema import TABLES, SourceFile

LARGE_GZIP_BYTES = 64 * 1024 * 1024
_CHUNK = 4 * 1024 * 1024

# (absolute path, size, mtime_ns) of gzip files already verified in this process.
_verified: set[tuple[str, int, int]] = set()

_FIX_MISSING = "download the file from PhysioNet into the same relative path of the release folder"
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


def relative(root: Path | SourceLayout, path: Path) -> str:
    """``path`` as it is named in messages: relative to the source root when below it."""
    root = root.root if isinstance(root, SourceLayout) else root
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def candidates(sf: SourceFile) -> tuple[str, ...]:
    """Paths inside the dataset's release folder accepted for a table, in order of preference."""
    return (sf.path, sf.path + ".gz") if sf.gzip_ok else (sf.path,)


def origin(root: Path | SourceLayout, name: str) -> Path:
    """The file on disk that table ``name`` comes from: ``PATH`` if present, else ``PATH.gz`` (when gzip is
    allowed), inside the dataset's release folder (``layout``; a plain root means the paper's releases); for
    the two silver scene tables, PhysioNet's ``silver_dataset/scene_graph.zip`` when ``scene_tabular/`` (the
    output of Chest ImaGenome's post-processing) is absent."""
    sf = source_file(name)
    layout = as_layout(root)
    folder = layout.dataset_dir(sf.dataset)
    for rel in candidates(sf):
        path = folder / rel
        if path.is_file():
            return path
    named = layout.relative(folder / sf.path)
    expected = " or ".join(layout.relative(folder / rel) for rel in candidates(sf))
    if name in scene_graph.TABULAR:
        if (folder / scene_graph.ZIP_PATH).is_file():
            return folder / scene_graph.ZIP_PATH
        expected += f", or {layout.relative(folder / scene_graph.ZIP_PATH)} that it is made from"
    raise SourceError(named + ("[.gz]" if sf.gzip_ok else ""), f"file not found (expected {expected})",
                      fix=_FIX_MISSING)


def resolve(root: Path | SourceLayout, name: str) -> Path:
    """The file to read for table ``name``: its ``origin``, or for a scene table read from the zip, the
    table converted from it once into the cache (``scene_graph.scene_tabular_cached``)."""
    layout = as_layout(root)
    path = origin(layout, name)
    if path.suffix != ".zip":
        return path
    cache = layout.cache_dir if layout.cache_dir is not None else Path(tempfile.gettempdir()) / "ehrxqa-cache"
    return scene_graph.scene_tabular_cached(path, cache / "scene_graph")[name]


def file_label(root: Path | SourceLayout, name: str) -> str:
    """How messages name table ``name``'s file: its origin, relative to the source root (for a table made
    from the scene-graph zip, the zip and the file made from it)."""
    path = origin(root, name)
    rel = relative(root, path)
    return f"{rel} (as {Path(source_file(name).path).name})" if path.suffix == ".zip" else rel


def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def read_header(root: Path | SourceLayout, name: str) -> list[str]:
    """Column names of the file for ``name``, checked: every required column must be present."""
    sf = source_file(name)
    path = resolve(root, name)
    rel = file_label(root, name)
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


def _state(path: Path) -> tuple:
    """The file's resolved path and ``hashing.stat_key`` (size, mtime, ctime, inode, device): an in-place edit
    that keeps size and mtime is still a new version."""
    return (str(path.resolve()), *stat_key(path.stat()))


def _cached_plain(root: Path, path: Path, cache_dir: Path) -> Path:
    """A verified plain copy of a gzip file in ``cache_dir`` (made once per path + size + mtime)."""
    state = _state(path)
    path_key = hashlib.sha256(state[0].encode()).hexdigest()[:16]
    state_key = hashlib.sha256(":".join(map(str, state[1:])).encode()).hexdigest()[:12]
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


@dataclass(frozen=True)
class Quoting:
    """How a file's quotes are read: ``quote_char`` '"' (standard) or None (quotes are ordinary characters)."""
    quote_char: str | None = '"'
    reason: str | None = None  # why the standard reading was given up (the column polars names)

    @property
    def literal(self) -> bool:
        return self.quote_char is None


_STANDARD = Quoting()
_quoting: dict[tuple[str, int, int], Quoting] = {}


def _field_starts_with_quote(path: Path) -> bool:
    """A byte scan (memchr speed): does any field of the tab-separated file begin with a quote?"""
    if path.stat().st_size == 0:
        return False
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return mm[:1] == b'"' or mm.find(b'\t"') >= 0 or mm.find(b'\n"') >= 0


def quoting(root: Path | SourceLayout, name: str) -> Quoting:
    """The quoting ``scan_raw`` uses for table ``name`` (decided once per file version; see the module
    docstring). Comma-separated and compressed files are always read with standard quoting."""
    sf = source_file(name)
    path = resolve(root, name)
    if sf.sep != "\t" or path.name.endswith(".gz"):
        return _STANDARD
    state = _state(path)
    if state not in _quoting:
        mode = _STANDARD
        if _field_starts_with_quote(path):
            try:  # every column projected, so every field is parsed
                pl.scan_csv(path, separator=sf.sep, infer_schema=False, encoding="utf8-lossy").select(
                    pl.all().null_count()).collect(engine="streaming")
            except pl.exceptions.PolarsError as exc:
                column = re.search(r"at column '([^']*)'", str(exc))
                where = f"a field of column '{column.group(1)}'" if column else "a field"
                mode = Quoting(None, f"{where} starts with a quote that does not enclose it, so quotes are read "
                                     "as ordinary characters in this file (the published pandas reader accepts "
                                     "such fields too, dropping their quotes)")
        _quoting[state] = mode
    return _quoting[state]


def scan_raw(root: Path | SourceLayout, name: str, cache_dir: Path | None = None, *,
             row_index_name: str | None = None) -> pl.LazyFrame:
    """Lazy scan of table ``name`` with every column as String (empty strings are null).

    The header is validated eagerly; a gzip file is verified by a streaming decompression the first
    time this process sees that version of it. ``row_index_name`` adds a 1-based UInt row number.
    Quotes are read as ``quoting(root, name)`` says.
    """
    sf = source_file(name)
    root = as_layout(root)
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
                       quote_char=quoting(root, name).quote_char,
                       row_index_name=row_index_name, row_index_offset=1)
