"""Digests for the release manifest: SHA-256 of bytes, a content digest for DuckDB files, a digest of code.

DuckDB files are not byte-reproducible: DuckDB writes the unused tail of compressed column segments
without clearing it (duckdb/duckdb#23382), so the same tables written twice, single-threaded and in the
same order, give files of the same size with different bytes (measured on 1.5.6, with and without
``force_compression='uncompressed'``). Their manifest entry therefore carries ``content_digest``: the
SHA-256 of the database's logical content (every table's DDL and its rows as CSV in a total order), which
two builds reproduce exactly. Everything else is hashed byte for byte.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterable
from pathlib import Path

import duckdb

from ehrxqa_pipeline.hashing import sha256_file

CHUNK = 1 << 20
# Code whose change can change a release (relative to the repository root): tracked source, no caches.
CODE_DIRS = ("ehrxqa_pipeline", "assets", "resources", "data_contracts")
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".tmp")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def duckdb_content_digest(path: Path) -> tuple[str, int]:
    """(SHA-256 of the logical content, total rows) of a DuckDB database file.

    Hashed, per user table in (schema, name) order: the qualified name, its ``CREATE TABLE`` statement
    (columns, types, keys as declared) and its rows as CSV with a header, ordered by all columns; then the
    ``CREATE INDEX`` / ``CREATE VIEW`` statements. Independent of block layout, of the order rows were
    inserted in and of the file's path.
    """
    h = hashlib.sha256()
    total = 0
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET threads = 1")
        db = con.execute("SELECT current_database()").fetchone()[0]
        tables = con.execute("SELECT schema_name, table_name, sql FROM duckdb_tables() WHERE database_name = ? "
                             "AND NOT internal AND NOT temporary ORDER BY 1, 2", [db]).fetchall()
        with tempfile.TemporaryDirectory(prefix="ehrxqa-digest-") as tmp:
            csv = Path(tmp) / "table.csv"
            for schema, table, sql in tables:
                name = f"{_ident(schema)}.{_ident(table)}"
                h.update(f"table {schema}.{table}\n{sql}\n".encode())
                con.execute(f"COPY (SELECT * FROM {name} ORDER BY ALL) TO '{csv}' (FORMAT csv, HEADER)")
                with open(csv, "rb") as f:
                    while block := f.read(CHUNK):
                        h.update(block)
                total += con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        for kind, query in (("index", "SELECT sql FROM duckdb_indexes() WHERE database_name = ? AND sql IS NOT NULL"),
                            ("view", "SELECT sql FROM duckdb_views() WHERE database_name = ? AND NOT internal")):
            for (sql,) in sorted(con.execute(query, [db]).fetchall()):
                h.update(f"{kind}\n{sql}\n".encode())
    finally:
        con.close()
    return h.hexdigest(), int(total)


def code_files(root: Path, dirs: Iterable[str] = CODE_DIRS) -> list[str]:
    """Source files under ``root/<dir>`` as sorted POSIX paths relative to ``root``: everything except
    caches (``__pycache__``, ``*.pyc``), hidden files, editor temp files and ``*.egg-info``."""
    out = []
    for d in dirs:
        base = Path(root) / d
        if not base.is_dir():
            continue
        for p in base.rglob("*"):
            rel = p.relative_to(root)
            if not p.is_file() or p.suffix in _SKIPPED_SUFFIXES or any(
                    part.startswith(".") or part == "__pycache__" or part.endswith(".egg-info") for part in rel.parts):
                continue
            out.append(rel.as_posix())
    return sorted(out)


def tree_digest(root: Path, files: Iterable[str]) -> str:
    """SHA-256 over ``<relative path> NUL <SHA-256 of its bytes>`` lines, in the given (sorted) order."""
    h = hashlib.sha256()
    for rel in files:
        h.update(f"{rel}\0{sha256_file(Path(root) / rel)}\n".encode())
    return h.hexdigest()
