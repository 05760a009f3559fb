"""The studies a released EHRXQA record's query resolves to, re-derived from the released SQL (issue 20).

A 1-image template's query reaches its study through the derived table ``(...) as t1``; a 2-image template's
through ``as t1`` (the target study, ``study_id1``) and ``as t2`` (the compared study, ``study_id2``).
``resolve_studies(query, conn)`` post-processes the released query (``neuralsql.postprocess_query``), parses it
(sqlglot, SQLite dialect), runs every such derived table on the database and returns alias -> distinct study ids.

``check_resolved(records, template_of, databases)`` does that for every released record and compares:
- ``resolved_value`` with the resolved studies (keys by template scope, ``item.study_keys``: exactly one study
  per key), ``{}`` for templates that resolve no study;
- ``value``'s written study ids (``study_id``, ``study_id1``, ``study_id2`` where the question names them)
  with the same studies.
train / valid records run on the silver database, test records on the gold one. Returns the differences
(empty = the metadata names what the queries ask about) and the number of records with study references.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import sqlglot
from sqlglot import exp

from ehrxqa_pipeline.questions.ehrxqa.item import RESOLVED_KEYS, study_keys
from ehrxqa_pipeline.questions.neuralsql import postprocess_query
from ehrxqa_pipeline.questions.neuralsql.parser import stand_ins

DATABASE_OF_SPLIT = {"train": "silver", "valid": "silver", "test": "gold"}
ALIAS_OF_KEY = {"study_id": "t1", "study_id1": "t1", "study_id2": "t2"}
if set(ALIAS_OF_KEY) != set(RESOLVED_KEYS):
    raise RuntimeError("every resolved_value key needs the alias of the derived table that resolves it")


@dataclass(frozen=True)
class Difference:
    """One record whose stored study metadata differs from what its released query resolves."""

    split: str
    id: int
    template_index: int
    field: str  # "resolved_value" or "value"
    stored: object
    resolved: object  # the resolved studies (key -> study id), or why they could not be resolved

    def row(self) -> dict:
        return {"split": self.split, "id": self.id, "template": self.template_index, "field": self.field,
                "stored": repr(self.stored), "resolved": repr(self.resolved)}


@lru_cache(maxsize=1 << 14)
def _subqueries(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    tree = sqlglot.parse_one(text, read="sqlite")
    out: dict[str, list[str]] = {}
    for node in tree.find_all(exp.Subquery):
        if node.alias in ("t1", "t2") and isinstance(node.this, exp.Query):
            out.setdefault(node.alias, []).append(node.this.sql(dialect="sqlite"))
    return tuple((alias, tuple(sqls)) for alias, sqls in out.items())


def study_subqueries(query: str) -> dict[str, list[str]]:
    """Alias (``t1`` / ``t2``) -> the SQLite text of every derived table of that alias in the query. Parsed once
    per template shape: the query's values are stood in for, and put back into the derived tables' text
    (``neuralsql.parser.stand_ins``); a shape that does not parse falls back to the query's own parse."""
    source = postprocess_query(query)
    text, put_back = stand_ins(source)
    try:
        found = _subqueries(text)
    except sqlglot.errors.SqlglotError:
        found, put_back = _subqueries(source), str
    return {alias: [put_back(sql) for sql in sqls] for alias, sqls in found}


def resolve_studies(query: str, conn: sqlite3.Connection, cache: dict | None = None) -> dict[str, list[int]]:
    """Alias -> sorted distinct study ids of all its derived tables in the query (one id when it resolves)."""
    cache = {} if cache is None else cache
    out: dict[str, list[int]] = {}
    for alias, sqls in study_subqueries(query).items():
        ids: set[int] = set()
        for sql in sqls:
            if sql not in cache:
                cache[sql] = {r[0] for r in conn.execute(f"select distinct _s.study_id from ({sql}) as _s")}
            ids |= cache[sql]
        out[alias] = sorted(ids)
    return out


def expected(record: Mapping, keys: tuple[str, ...], conn: sqlite3.Connection,
             cache: dict | None = None) -> dict[str, int] | str:
    """key -> the one study the record's query resolves for it, or a sentence saying why there is none."""
    try:
        found = resolve_studies(record["query"], conn, cache)
    except (sqlglot.errors.SqlglotError, sqlite3.Error) as e:
        return f"the query does not run: {e}"
    out = {}
    for key in keys:
        ids = found.get(ALIAS_OF_KEY[key], [])
        if len(ids) != 1:
            return f"{key}: the derived table {ALIAS_OF_KEY[key]} resolves {len(ids)} studies {ids[:5]}"
        out[key] = ids[0]
    return out


def _connect(path: str | Path) -> sqlite3.Connection:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no database {path}; materialize ehr_db/silver and ehr_db/gold")
    return sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)


def check_resolved(records: Mapping[str, list[Mapping]], template_of: Mapping[tuple[str, int], tuple[int, str]],
                   databases: Mapping[str, str | Path]) -> tuple[list[Difference], int]:
    """Differences between every record's stored studies and those its query resolves; records checked.

    ``template_of``: (split, id) -> (template index, scope), as ``ehrxqa.questions`` stores them; the scope
    gives the expected keys (``item.study_keys``), so a template of any scope without study references
    (N-image, table, unanswerable) must have ``resolved_value == {}``."""
    out: list[Difference] = []
    checked = 0
    conns = {db: _connect(path) for db, path in databases.items()}
    try:
        for split, recs in records.items():
            conn, cache = conns[DATABASE_OF_SPLIT[split]], {}
            for r in recs:
                if (split, r["id"]) not in template_of:
                    side = DATABASE_OF_SPLIT[split]
                    raise ValueError(f"release/ehrxqa/{split}.json id {r['id']} is not in ehrxqa.{side}; "
                                     f"re-materialize release/ehrxqa/{side}")
                index, scope = template_of[split, r["id"]]
                keys = study_keys(scope)
                stored = r.get("resolved_value")
                if not keys:
                    if stored != {}:
                        out.append(Difference(split, r["id"], index, "resolved_value", stored, {}))
                    continue
                checked += 1
                want = expected(r, keys, conn, cache)
                if stored != want:
                    out.append(Difference(split, r["id"], index, "resolved_value", stored, want))
                written = {k: v for k, v in (r.get("value") or {}).items() if k in RESOLVED_KEYS}
                if written and (isinstance(want, str) or any(want.get(k) != v for k, v in written.items())):
                    out.append(Difference(split, r["id"], index, "value", written, want))
    finally:
        for c in conns.values():
            c.close()
    return out, checked
