"""Parses of NeuralSQL queries kept on disk, shared by processes and builds (``ParseStore``).

A parse (``parser.parse_neuralsql``) is a function of the query text, the names the database knows and the
parser's code; sqlglot makes it the dearest part of executing a query (about 2 ms). Each build runs every
EHRXQA item's query in the consistency check, in worker processes, and again in the scores; a rebuild after
an upstream edit runs the same queries once more. The store keeps each parse under a key of all its inputs,
the parser's source and sqlglot's version included (``fingerprint``), so a changed parser or database never
reads an old parse; only queries that parse are kept. It is a SQLite file, which several processes may read
and write at once. A store that cannot be read or written is left alone: the queries are parsed (the result is
the same), and the reason is given once to ``warn``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import closing
from pathlib import Path

from ehrxqa_pipeline.questions.neuralsql.parser import ParsedQuery, VqaCall

TABLE = "parses"
BATCH = 500  # keys per lookup statement (SQLite's default limit on bound parameters is 32,766)


@functools.cache
def fingerprint() -> str:
    """The parser's code: its module's source and sqlglot's version."""
    import sqlglot

    from ehrxqa_pipeline.questions.neuralsql import parser

    text = Path(parser.__file__).read_bytes() + sqlglot.__version__.encode()
    return hashlib.sha256(text).hexdigest()


def options_digest(tables: Collection[str] | None, functions: Collection[str] | None,
                   hidden_tables: Collection[str], postprocess: bool) -> str:
    """The parse's arguments other than the text (``parse_neuralsql``), with the parser's ``fingerprint``."""
    names = lambda values: None if values is None else sorted({v.lower() for v in values})  # noqa: E731
    doc = [fingerprint(), names(tables), names(functions), names(hidden_tables), postprocess]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def to_json(parsed: ParsedQuery) -> str:
    return json.dumps([parsed.source, parsed.sql, [[c.question, c.study, c.projected, c.line, c.col]
                                                   for c in parsed.calls], parsed.ordered])


def from_json(text: str) -> ParsedQuery:
    source, sql, calls, ordered = json.loads(text)
    return ParsedQuery(source, sql, tuple(VqaCall(*c) for c in calls), ordered)


class ParseStore:
    """``get(options, queries)`` -> the kept parses of those queries; ``put(options, parses)`` keeps more.
    ``options`` is an ``options_digest``. Entries of another parser's ``fingerprint`` are dropped on ``put``."""

    def __init__(self, path: str | Path, warn: Callable[[str], None] | None = None):
        self.path, self.broken = Path(path), False
        self.warn = warn or logging.getLogger(__name__).warning

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=60)  # other processes' writes are short
        con.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, "
                    "parse TEXT NOT NULL) WITHOUT ROWID")
        return con

    def _failed(self, error: Exception) -> None:
        if not self.broken:
            self.warn(f"NeuralSQL parse store {self.path} not used ({type(error).__name__}: {error}); the queries "
                      "are parsed instead (same results). Delete the file if it stays unreadable.")
        self.broken = True

    @staticmethod
    def _key(options: str, query: str) -> str:
        return hashlib.sha256(f"{options}\n{query}".encode()).hexdigest()

    def get(self, options: str, queries: Iterable[str]) -> dict[str, ParsedQuery]:
        keys = {self._key(options, q): q for q in queries}
        if self.broken or not keys:
            return {}
        found = {}
        try:
            with closing(self._connect()) as con:
                wanted = list(keys)
                for s in range(0, len(wanted), BATCH):
                    part = wanted[s:s + BATCH]
                    found.update(con.execute(f"SELECT key, parse FROM {TABLE} WHERE key IN "
                                             f"({', '.join('?' * len(part))})", part).fetchall())
            return {keys[k]: from_json(v) for k, v in found.items()}
        except (sqlite3.Error, OSError, ValueError, TypeError) as e:  # unreadable file or row: parse instead
            self._failed(e)
            return {}

    def put(self, options: str, parses: Mapping[str, ParsedQuery]) -> None:
        if self.broken or not parses:
            return
        try:
            with closing(self._connect()) as con, con:  # one transaction
                con.execute(f"DELETE FROM {TABLE} WHERE fingerprint <> ?", [fingerprint()])
                con.executemany(f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?, ?)",
                                [(self._key(options, q), fingerprint(), to_json(p)) for q, p in parses.items()])
        except (sqlite3.Error, OSError) as e:
            self._failed(e)
