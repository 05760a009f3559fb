"""What sqlglot made of NeuralSQL queries, kept on disk and shared by processes and builds (``ParseStore``).

Two pure functions of a query's text are kept, each a ``kind``:
- ``parse``: the executor's parse (``parser.parse_neuralsql``), also a function of the names the database knows;
  sqlglot makes it the dearest part of executing a query (about 2 ms). Each build runs every EHRXQA item's query
  in the consistency check, in worker processes, and again in the scores.
- ``shape``: the published query shape of a released query (``shapes.shape``), checked on every release file.
A rebuild after an upstream edit meets the same queries once more. Each result is kept under a key of all its
inputs, its kind's code and sqlglot's version included (``fingerprint``), so an edited parser or another
database never reads an old result; a kind's entries of other code are dropped when it writes. It is a SQLite
file, which several processes may read and write at once. A store that cannot be read or written is left
alone: the queries are parsed (the result is the same), and the reason is given once to ``warn``.
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

TABLE = "results"
BATCH = 500  # keys per lookup statement (SQLite's default limit on bound parameters is 32,766)
KINDS = {"parse": "parser", "shape": "shapes"}  # kind -> the module of ehrxqa_pipeline.questions.neuralsql


@functools.cache
def fingerprint(kind: str) -> str:
    """The code of ``kind``: its module's source and sqlglot's version."""
    import importlib

    import sqlglot

    module = importlib.import_module(f"ehrxqa_pipeline.questions.neuralsql.{KINDS[kind]}")
    return hashlib.sha256(Path(module.__file__).read_bytes() + sqlglot.__version__.encode()).hexdigest()


def options_digest(tables: Collection[str] | None, functions: Collection[str] | None,
                   hidden_tables: Collection[str], postprocess: bool) -> str:
    """The parse's arguments other than the text (``parse_neuralsql``), with the parser's ``fingerprint``."""
    names = lambda values: None if values is None else sorted({v.lower() for v in values})  # noqa: E731
    doc = [fingerprint("parse"), names(tables), names(functions), names(hidden_tables), postprocess]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def to_json(parsed: ParsedQuery) -> str:
    return json.dumps([parsed.source, parsed.sql, [[c.question, c.study, c.projected, c.line, c.col]
                                                   for c in parsed.calls], parsed.ordered])


def from_json(text: str) -> ParsedQuery:
    source, sql, calls, ordered = json.loads(text)
    return ParsedQuery(source, sql, tuple(VqaCall(*c) for c in calls), ordered)


class ParseStore:
    """``get(kind, options, queries)`` -> the kept results (text) of those queries; ``put(kind, options,
    results)`` keeps more. ``options`` digests the result's other inputs with its kind's ``fingerprint``
    (``options_digest`` for parses)."""

    def __init__(self, path: str | Path, warn: Callable[[str], None] | None = None):
        self.path, self.broken = Path(path), False
        self.warn = warn or logging.getLogger(__name__).warning

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=60)  # other processes' writes are short
        con.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
                    "fingerprint TEXT NOT NULL, result TEXT NOT NULL) WITHOUT ROWID")
        return con

    def _failed(self, error: Exception) -> None:
        if not self.broken:
            self.warn(f"NeuralSQL parse store {self.path} not used ({type(error).__name__}: {error}); the queries "
                      "are parsed instead (same results). Delete the file if it stays unreadable.")
        self.broken = True

    @staticmethod
    def _key(kind: str, options: str, query: str) -> str:
        return hashlib.sha256(f"{kind}\n{options}\n{query}".encode()).hexdigest()

    def get(self, kind: str, options: str, queries: Iterable[str]) -> dict[str, str]:
        keys = {self._key(kind, options, q): q for q in queries}
        if self.broken or not keys:
            return {}
        found = {}
        try:
            with closing(self._connect()) as con:
                wanted = list(keys)
                for s in range(0, len(wanted), BATCH):
                    part = wanted[s:s + BATCH]
                    found.update(con.execute(f"SELECT key, result FROM {TABLE} WHERE key IN "
                                             f"({', '.join('?' * len(part))})", part).fetchall())
        except (sqlite3.Error, OSError) as e:  # not a SQLite file, locked for a minute, unreadable: parse instead
            self._failed(e)
            return {}
        return {keys[k]: v for k, v in found.items()}

    def put(self, kind: str, options: str, results: Mapping[str, str]) -> None:
        if self.broken or not results:
            return
        try:
            with closing(self._connect()) as con, con:  # one transaction
                con.execute(f"DELETE FROM {TABLE} WHERE kind = ? AND fingerprint <> ?", [kind, fingerprint(kind)])
                con.executemany(f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?, ?, ?)",
                                [(self._key(kind, options, q), kind, fingerprint(kind), r)
                                 for q, r in results.items()])
        except (sqlite3.Error, OSError) as e:
            self._failed(e)
