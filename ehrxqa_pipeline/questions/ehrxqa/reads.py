"""Which tables of a SQLite database the sampling of one template read (issue 23): the sampling memo keeps each
template's items under the content of those tables, so an EHR table edit re-draws only the templates whose draws
read the edited table (``sampling.sample_database``).

``TableReads(conn)`` gives ``conn`` wrapped (``.conn``: the filler runs every statement through it) and names, for
every statement run through the wrapper while a ``frame`` is open, the tables of the connection (main, temp and
attached schemas) whose name appears in the statement as a word, and adds them to every open frame. That over-counts
(a table only named in a string counts too): the memo then redoes more, never less. (The exported databases have no
views, whose tables a statement would not name.)
What a filler keeps between templates (its pools, the studies it resolved, the answer it ran last) is kept through
``cached`` or a ``cached_read`` property: the tables read while a value was made stay with it, and are added to the
open frames each time it is used again, so a template that uses a pool another template made counts its tables. What
the filler reads when it is made (``ImageFiller.read_at_start``) counts for every template.

A value kept from the database any other way would escape the frames: tests/ehrxqa/test_reads.py draws every
template alone on a fresh filler and checks that its frame in a shared filler holds at least those tables.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")
_WORD = re.compile(r"\w+")
_MISSING = object()


def tables_of(conn: sqlite3.Connection) -> frozenset[str]:
    """The tables of every schema of ``conn`` (main, temp, attached), lower case."""
    schemas = [row[1] for row in conn.execute("PRAGMA database_list")]
    master = {"temp": "sqlite_temp_master"}
    return frozenset(row[0].lower() for s in schemas for row in conn.execute(
        f'SELECT name FROM "{s}".{master.get(s, "sqlite_master")} WHERE type = \'table\''))


class TableReads:
    """The tables a connection's statements name, collected per open frame (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = _Counted(conn, self)
        self.tables = tables_of(conn)
        self._frames: list[set[str]] = []
        self._kept: dict = {}  # key -> (value, the tables read to make it)

    def named(self, sql: str) -> set[str]:
        """The connection's tables that ``sql`` names as a word."""
        return self.tables.intersection(_WORD.findall(sql.lower()))

    def note(self, tables: Iterable[str]) -> None:
        """Count ``tables`` as read by every open frame."""
        for read in self._frames:
            read.update(tables)

    def statement(self, sql: str) -> None:
        """Count the tables ``sql`` names as read by every open frame."""
        if self._frames:
            self.note(self.named(sql))

    @contextmanager
    def frame(self) -> Iterator[set[str]]:
        """A set that collects the tables read until the block ends (frames nest: an inner one's reads count for
        the outer ones too)."""
        read: set[str] = set()
        self._frames.append(read)
        try:
            yield read
        finally:
            self._frames.pop()

    def cached(self, key, make: Callable[..., T], *args) -> T:
        """``make(*args)``, made once per ``key`` (it must depend on the database's content and ``key`` only); each
        use counts the tables its making read."""
        kept = self._kept.get(key, _MISSING)
        if kept is _MISSING:
            with self.frame() as read:
                value = make(*args)
            self._kept[key] = kept = (value, frozenset(read))
        elif self._frames:
            self.note(kept[1])
        return kept[0]


class _Counted:
    """A connection whose ``execute`` counts the tables each statement names (``TableReads.statement``); the
    rest is the connection's."""

    def __init__(self, conn: sqlite3.Connection, reads: TableReads):
        self.raw, self._reads = conn, reads

    def execute(self, sql: str, parameters=()) -> sqlite3.Cursor:
        self._reads.statement(sql)
        return self.raw.execute(sql, parameters)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


class cached_read(Generic[T]):
    """A ``functools.cached_property`` kept through its instance's ``trace`` (a ``TableReads``): each use counts
    the tables its making read."""

    def __init__(self, make: Callable[..., T]):
        self.make, self.__doc__ = make, make.__doc__
        self.name = make.__name__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return instance.trace.cached(self, self.make, instance)  # (by this descriptor: two owners may share a trace)
