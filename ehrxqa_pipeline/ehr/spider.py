"""``tables.json``: the schema of an exported EHRXQA database in Spider's format, which text-to-SQL tools read
(EHRSQL ships one for its databases).

Grain: one entry per database file; ``export.export_database`` writes a one-entry ``tables.json`` beside each
``mimic_iv_cxr.{db,duckdb}`` (``databases/silver/tables.json``, ``databases/gold/tables.json``). Its ``db_id`` is
the database name the released records carry (``mimic_iv_cxr``: train / valid records run on the silver
database, test records on the gold one), so a tool that joins records to schemas by ``db_id`` finds it.
Source: the declared DDL both files are created with (``ddl``, from ``data_contracts/ehr_db.<table>.yaml``), in
the export's table order (parents first) and column order; ``tests/ehr/test_spider.py`` checks it against the
SQLite file's ``PRAGMA table_info`` and ``foreign_key_list``.

Fields (Spider's): ``table_names_original`` (as in the DDL) and ``table_names`` (underscores as spaces);
``column_names_original`` and ``column_names``, ``[table index, name]`` with ``[-1, "*"]`` first;
``column_types`` per column (Spider's ``text``, ``number``, ``time``, ``boolean``, ``others``; ``*`` is
``text``); ``primary_keys`` (column indices: ``row_id`` of every table); ``foreign_keys`` (``[column, referenced
column]`` index pairs, in the DDL's order). The UNIQUE natural keys the foreign keys reference have no Spider
field. Keys sorted, no path and no time: the same DDL gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ehrxqa_pipeline.atomic import write_json
from ehrxqa_pipeline.ehr.ddl import PRIMARY_KEY, Table

TABLES_JSON = "tables.json"
# ddl's column types -> Spider's (SQLite stores ``ts`` as 'YYYY-MM-DD HH:MM:SS' text: a time to Spider)
SPIDER_TYPES = {"int": "number", "float": "number", "str": "text", "ts": "time"}


def natural(name: str) -> str:
    """Spider's readable name: lower case, underscores as spaces (``d_icd_diagnoses`` -> ``d icd diagnoses``)."""
    return name.replace("_", " ").lower()


def spider_schema(db_id: str, tables: Iterable[Table]) -> dict:
    """The Spider entry of a database made of ``tables`` (in creation order)."""
    tables = tuple(tables)
    columns: list[tuple[int, str]] = [(-1, "*")]
    types = ["text"]
    index: dict[tuple[str, str], int] = {}
    for t, table in enumerate(tables):
        for column in table.columns:
            index[(table.name, column.name)] = len(columns)
            columns.append((t, column.name))
            types.append(SPIDER_TYPES[column.type])
    foreign = []
    for table in tables:
        for column, parent, parent_column in table.foreign_keys:
            if (parent, parent_column) not in index:
                raise ValueError(f"{table.name}.{column} references {parent}.{parent_column}, not in the database")
            foreign.append([index[(table.name, column)], index[(parent, parent_column)]])
    return {
        "db_id": db_id,
        "table_names_original": [t.name for t in tables],
        "table_names": [natural(t.name) for t in tables],
        "column_names_original": [[t, name] for t, name in columns],
        "column_names": [[t, name if t < 0 else natural(name)] for t, name in columns],
        "column_types": types,
        "primary_keys": [index[(t.name, PRIMARY_KEY)] for t in tables],
        "foreign_keys": foreign,
    }


def write_tables_json(path: Path, db_id: str, tables: Iterable[Table]) -> Path:
    """``path`` (a ``tables.json``) with the one entry of ``spider_schema``, written atomically."""
    return write_json(path, [spider_schema(db_id, tables)], indent=2, sort_keys=True)
