"""The declared schema of the integrated database: columns, types, NOT NULL, keys, foreign keys.

Read from the data contracts ``data_contracts/ehr_db.<table>.yaml``: the 17 MIMIC-IV-derived tables + TB_CXR
(user-facing) and TB_CXR_PLUS (the answer sheet, kept in a separate file). The build casts its tables to these types, the export writes this DDL to DuckDB
and SQLite (the published build executes its DDL and then replaces every table, losing all keys -- defect
13), and the key checks read the same declarations. Column order follows reference-builders.md 5.3.

Types: ``int`` BIGINT / INTEGER, ``float`` DOUBLE / REAL, ``str`` VARCHAR / TEXT (lower-cased and stripped),
``ts`` TIMESTAMP in DuckDB and ``'YYYY-MM-DD HH:MM:SS'`` TEXT in SQLite. Every table has ``row_id``
(0..n-1, PRIMARY KEY); natural keys are UNIQUE and foreign keys reference them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ehrxqa_pipeline.contracts import load_contract

DUCKDB_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "VARCHAR", "ts": "TIMESTAMP"}
SQLITE_TYPES = {"int": "INTEGER", "float": "REAL", "str": "TEXT", "ts": "TEXT"}
PRIMARY_KEY = "row_id"  # every table's


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    not_null: bool


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    unique: tuple[tuple[str, ...], ...] = ()
    foreign_keys: tuple[tuple[str, str, str], ...] = ()  # (column, parent table, parent column)
    indexes: tuple[tuple[str, ...], ...] = ()  # SQLite secondary indexes (foreign keys by default)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def types(self) -> dict[str, str]:
        return {c.name: c.type for c in self.columns}


# contract type -> the type names of this module
_TYPE = {"int": "int", "float": "float", "str": "str", "datetime": "ts"}
# Parents before children: the export creates and fills the tables in this order.
ORDER = ("patients", "admissions", "d_icd_diagnoses", "d_icd_procedures", "d_labitems", "d_items", "diagnoses_icd",
         "procedures_icd", "labevents", "prescriptions", "cost", "icustays", "chartevents", "inputevents",
         "outputevents", "microbiologyevents", "transfers", "tb_cxr")
# SQLite secondary indexes: every foreign-key column (a NeuralSQL / gold query filters by patient, visit or
# study: without them each lookup scans the table), except where named here
INDEXES = {"tb_cxr_plus": (("study_id", "relation"), ("subject_id",))}


def _table(name: str) -> Table:
    """``name``'s declaration from its data contract (data_contracts/ehr_db.<name>.yaml)."""
    contract = load_contract(f"ehr_db.{name}")
    fks = tuple((fk.columns[0], fk.references, fk.ref_columns[0]) for fk in contract.foreign_keys)
    return Table(name, tuple(Column(c.name, _TYPE[c.type], not c.nullable) for c in contract.columns),
                 contract.unique, fks, INDEXES.get(name, tuple((c,) for c, _, _ in fks)))


TABLES: tuple[Table, ...] = tuple(_table(name) for name in ORDER)
ANSWER_TABLE = _table("tb_cxr_plus")

BY_NAME: dict[str, Table] = {t.name: t for t in (*TABLES, ANSWER_TABLE)}
MIMIC_TABLES = tuple(t.name for t in TABLES if t.name != "tb_cxr")  # the 17 MIMIC-IV-derived tables


def create_sql(table: Table, dialect: str, qualified: str | None = None) -> str:
    """CREATE TABLE statement of ``table`` for ``dialect`` ('duckdb' or 'sqlite')."""
    types = DUCKDB_TYPES if dialect == "duckdb" else SQLITE_TYPES
    lines = []
    for c in table.columns:
        extra = " NOT NULL" if c.not_null else ""
        if c.name == PRIMARY_KEY:
            extra += " PRIMARY KEY"
        lines.append(f"{c.name} {types[c.type]}{extra}")
    lines += [f"UNIQUE ({', '.join(u)})" for u in table.unique]
    lines += [f"FOREIGN KEY ({col}) REFERENCES {parent} ({pcol})" for col, parent, pcol in table.foreign_keys]
    body = ",\n    ".join(lines)
    return f"CREATE TABLE {qualified or table.name} (\n    {body}\n)"


def index_sql(table: Table) -> list[str]:
    """CREATE INDEX statements of ``table`` (SQLite; run after loading)."""
    return [f"CREATE INDEX idx_{table.name}_{'_'.join(cols)} ON {table.name} ({', '.join(cols)})"
            for cols in table.indexes]


def select_sql(table: Table, source: str, dialect: str) -> str:
    """SELECT of ``table``'s columns from ``source`` ordered by row_id; SQLite gets timestamps as text."""
    cols = [f"strftime({c.name}, '%Y-%m-%d %H:%M:%S') AS {c.name}" if dialect == "sqlite" and c.type == "ts"
            else c.name for c in table.columns]
    return f"SELECT {', '.join(cols)} FROM {source} ORDER BY row_id"
