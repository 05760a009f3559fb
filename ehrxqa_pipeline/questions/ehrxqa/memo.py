"""Work kept between builds, so that an edit redoes only what reads what it changed (issue 23).

Used by EHRXQA sampling and its consistency check (``sampling.sample_database``, ``records.check_stored``) and by
the scores' table items (``vqa.evaluate.table_scores``, whose code digest adds ``vqa/``).

The check keeps, per database and template, that the template's items passed, under the digest of the items, the
content of each table their queries name (``table_digests``, ``tables_named``) and, for image templates, the
answer sheet's file and the tables the oracle reads besides (``ORACLE_TABLES``): an EHR table edit re-checks the
templates that name the table (a lab edit at full scale: 21 of the 416 silver templates), a label edit the image
templates. Sampling keeps each template's items under the content of the tables its draws read (``reads``,
``content_digests``): a lab name edit re-draws the templates that read the lab tables. The scores keep each table
query's run under the content of the tables it names (``vqa.evaluate._run_keys``), as they do the image queries'.

A table template (scopes TABLE-*) reads the database's MIMIC-IV tables and nothing of TB_CXR_PLUS: sampling and
the consistency check run its items on a connection without the answer sheet attached (and, in the check,
without a VQA module), where a query that read the answer sheet or asked an image question would fail. A label
edit changes the answer sheet, never the database: the gold side's check then redoes the image and image+table
templates only, and its sampling those whose draws read TB_CXR_PLUS (at full scale the table templates are about
half of the sampling and a third of the check).

``ResultMemo`` keeps one JSON value per name in a file under EHRXQA_HOME/cache, with a digest of everything it
was made from (``inputs``); ``get`` answers only for those same inputs. ``code_digest()`` is the digest of the code
that samples and checks: every source file of ``ehrxqa_pipeline.questions`` and the modules it imports from the
package (``CODE_FILES``; a test checks that list against what sampling imports), numpy's version (the random
streams) and SQLite's (the query results). A missing or damaged file is an empty memo; a ``put`` that changes an
entry rewrites the file atomically (one that keeps what is there writes nothing).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from importlib import metadata
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.atomic import read_json_object, write_text
from ehrxqa_pipeline.hashing import bytes_digest, combine, file_digest, remembered

_PACKAGE = Path(__file__).resolve().parents[2]  # ehrxqa_pipeline/
# What sampling and the check run, relative to the package: the questions package and the modules it imports
# from outside it (a test checks this list against what importing sampling and the check loads)
CODE_FILES = ("questions", "rng.py", "names.py", "filters.py")


@functools.cache
def code_digest(extra: tuple[str, ...] = ()) -> str:
    """The digest of the code that samples and checks (see the module docstring), with the ``extra`` files or
    folders of the package (relative to it) of a caller that runs more, e.g. ("vqa",) for the scores."""
    files = sorted(p for entry in (*CODE_FILES, *extra)
                   for p in ((_PACKAGE / entry).rglob("*.py") if (_PACKAGE / entry).is_dir() else [_PACKAGE / entry]))
    return combine(*(f"{p.relative_to(_PACKAGE).as_posix()}:{file_digest(p)}" for p in files),
                   metadata.version("numpy"), sqlite3.sqlite_version)


def query_key(query: str) -> str:
    """A query's key where runs are kept by query (its text is about 300 characters): a digest of its text."""
    return bytes_digest(query.encode())[:32]


# What the oracle VQA module reads of the database besides the answer sheet, whichever tables a query names: each
# image's patient's gender (``neuralsql.oracle.load_answer_sheet``). Kept work that the oracle answered depends on it.
ORACLE_TABLES = ("patients",)


def table_digests(database: Path) -> dict[str, str]:
    """Each table of a SQLite database file -> the digest of its definition and rows (in rowid order): what an item
    that reads the table depends on (0.2 s for the full-scale silver database's 160,000 rows; remembered while the
    file is unchanged, as file digests are: ``hashing.remembered``)."""
    return json.loads(remembered(database, "tables", lambda: json.dumps(_table_digests(database), sort_keys=True)))


def _table_digests(database: Path) -> dict[str, str]:
    digests = {}
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as con:
        for name, sql in con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            h = hashlib.blake2b(sql.encode(), digest_size=16)
            rows = con.execute(f'SELECT * FROM "{name}" ORDER BY rowid')
            while chunk := rows.fetchmany(10_000):
                h.update(repr(chunk).encode())
            digests[name.lower()] = h.hexdigest()
    return digests


SCHEMA = "@schema"  # ``content_digests``' entry for a database's schema: every table, index and view definition
ANSWER_SHEET_TABLE = "tb_cxr_plus"


def content_digests(database: Path, answer_sheet: Path | None = None) -> dict[str, str]:
    """What sampling may read of a database and its answer sheet, each part by content: each table of the
    database (``table_digests``), its whole schema (``SCHEMA``: an index changes the order of rows a query
    returns unordered) and TB_CXR_PLUS by the answer sheet's file when that is another file."""
    if not Path(database).is_file():
        return {}  # (nothing is kept; opening the database then names the missing file and the fix)
    digests = table_digests(database)
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as con:
        schema = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name").fetchall()
    digests[SCHEMA] = bytes_digest(repr(schema).encode())
    if answer_sheet is not None and Path(answer_sheet).is_file() and \
            Path(answer_sheet).resolve() != Path(database).resolve():
        digests[ANSWER_SHEET_TABLE] = file_digest(answer_sheet)
    return digests


def tables_named(items: pl.DataFrame, tables: Iterable[str], by: str = "template_index",
                 queries: tuple[str, ...] = ("gold_sql", "neural_sql")) -> dict:
    """Each value of column ``by`` -> the ``tables`` (sorted) whose name appears as a word in the ``queries``
    columns of its ``items``: every table a query reads, and perhaps one it only names (in a string, say), which
    makes a memo redo more, never less (0.2 s for the full-scale silver items' 65,780 queries)."""
    names = sorted(tables, key=len, reverse=True)
    if not names or items.is_empty():
        return {}
    word = r"(?i)\b(?:" + "|".join(re.escape(n) for n in names) + r")\b"
    found = (items.select(by, q=pl.concat_list(*queries)).explode("q")
             .select(by, name=pl.col("q").str.extract_all(word)).explode("name").drop_nulls()
             .select(by, pl.col("name").str.to_lowercase()).unique()
             .group_by(by).agg(pl.col("name").sort()))
    return dict(zip(found[by].to_list(), found["name"].to_list()))


def table_scope(scope: str) -> bool:
    """Whether a template of ``scope`` reads the MIMIC-IV tables only (never TB_CXR_PLUS)."""
    return scope.startswith("TABLE")


class ResultMemo:
    """Named results in one JSON file (``path``; None: nothing is kept), each with the digest of its inputs."""

    def __init__(self, path: Path | None):
        self.path, self.entries = path, read_json_object(path)  # none yet, or damaged: everything is done again
        self._changed = False

    @staticmethod
    def inputs(*arguments, code: tuple[str, ...] = ()) -> str:
        """The digest of the code (``code_digest(code)``) and JSON-able ``arguments`` (content digests of what the
        result was made from among them)."""
        return combine(code_digest(code), json.dumps(arguments, sort_keys=True, default=str))

    def get(self, name: str, inputs: str):
        """The value put under ``name`` from ``inputs``; None when there is none or it was made from others."""
        last = self.entries.get(name)
        if self.path is None or not isinstance(last, dict) or last.get("inputs") != inputs:
            return None
        return last.get("value")

    def put(self, name: str, inputs: str, value, *, save: bool = True) -> None:
        """Keep ``value`` under ``name``; ``save=False`` leaves the file to a later ``save`` (one write for
        several values)."""
        if self.path is None:
            return
        entry = {"inputs": inputs, "value": value}
        if self.entries.get(name) != entry:
            self.entries[name], self._changed = entry, True
        if save:
            self.save()

    def keep_only(self, names: Iterable[str]) -> None:
        """Drop every entry but ``names`` (those of templates no longer drawn, of a memo's older layout)."""
        names = set(names)
        if set(self.entries) - names:
            self.entries, self._changed = {k: v for k, v in self.entries.items() if k in names}, True

    def save(self) -> None:
        """Write the file if a ``put`` changed an entry since it was read or last written."""
        if self.path is not None and self._changed:
            write_text(self.path, json.dumps(self.entries) + "\n")  # key order kept: values are records
            self._changed = False
