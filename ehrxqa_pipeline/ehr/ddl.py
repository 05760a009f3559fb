"""The declared schema of the integrated database: columns, types, NOT NULL, keys, foreign keys.

One statement of the 17 MIMIC-IV-derived tables + TB_CXR (user-facing) and TB_CXR_PLUS (the answer sheet,
kept in a separate file). The build casts its tables to these types, the export writes this DDL to DuckDB
and SQLite (the published build executes its DDL and then replaces every table, losing all keys -- defect
13), and the key checks read the same declarations. Column order follows reference-builders.md 5.3.

Types: ``int`` BIGINT / INTEGER, ``float`` DOUBLE / REAL, ``str`` VARCHAR / TEXT (lower-cased and stripped),
``ts`` TIMESTAMP in DuckDB and ``'YYYY-MM-DD HH:MM:SS'`` TEXT in SQLite. Every table has ``row_id``
(0..n-1, PRIMARY KEY); natural keys are UNIQUE and foreign keys reference them.
"""

from __future__ import annotations

from dataclasses import dataclass

DUCKDB_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "VARCHAR", "ts": "TIMESTAMP"}
SQLITE_TYPES = {"int": "INTEGER", "float": "REAL", "str": "TEXT", "ts": "TEXT"}


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


def _table(name: str, spec: str, unique=(), fks=(), indexes=None) -> Table:
    """``spec``: ``"col:type, col:type!"``; ``!`` marks NOT NULL. ``row_id:int!`` is prepended. Every
    foreign-key column gets a SQLite index unless ``indexes`` says otherwise (a NeuralSQL / gold query
    filters by patient, visit or study: without them each lookup scans the table)."""
    cols = [Column("row_id", "int", True)]
    for part in spec.split(","):
        col, typ = part.strip().split(":")
        cols.append(Column(col, typ.rstrip("!"), typ.endswith("!")))
    indexes = tuple((c,) for c, _, _ in fks) if indexes is None else tuple(indexes)
    return Table(name, tuple(cols), tuple(unique), tuple(fks), indexes)


_SUBJ = ("subject_id", "patients", "subject_id")
_HADM = ("hadm_id", "admissions", "hadm_id")
_STAY = ("stay_id", "icustays", "stay_id")
_ITEM = ("itemid", "d_items", "itemid")

# Parents before children: the export creates and fills the tables in this order.
TABLES: tuple[Table, ...] = (
    _table("patients", "subject_id:int!, gender:str!, dob:ts!, dod:ts", [("subject_id",)]),
    _table("admissions", "subject_id:int!, hadm_id:int!, admittime:ts!, dischtime:ts, admission_type:str, "
           "admission_location:str, discharge_location:str, insurance:str, language:str, marital_status:str, "
           "age:int!", [("hadm_id",)], [_SUBJ]),
    _table("d_icd_diagnoses", "icd_code:str!, long_title:str!", [("icd_code",)]),
    _table("d_icd_procedures", "icd_code:str!, long_title:str!", [("icd_code",)]),
    _table("d_labitems", "itemid:int!, label:str!", [("itemid",)]),
    _table("d_items", "itemid:int!, label:str!, abbreviation:str, linksto:str!", [("itemid",)]),
    _table("diagnoses_icd", "subject_id:int!, hadm_id:int!, icd_code:str!, charttime:ts!", (),
           [_SUBJ, _HADM, ("icd_code", "d_icd_diagnoses", "icd_code")]),
    _table("procedures_icd", "subject_id:int!, hadm_id:int!, icd_code:str!, charttime:ts!", (),
           [_SUBJ, _HADM, ("icd_code", "d_icd_procedures", "icd_code")]),
    _table("labevents", "subject_id:int!, hadm_id:int!, itemid:int!, charttime:ts!, valuenum:float!, "
           "valueuom:str!", (), [_SUBJ, _HADM, ("itemid", "d_labitems", "itemid")]),
    _table("prescriptions", "subject_id:int!, hadm_id:int!, starttime:ts!, stoptime:ts, drug:str!, "
           "dose_val_rx:str!, dose_unit_rx:str!, route:str!", (), [_SUBJ, _HADM]),
    _table("cost", "subject_id:int!, hadm_id:int!, event_type:str!, event_id:int!, chargetime:ts!, cost:float!",
           [("event_type", "event_id")], [_SUBJ, _HADM]),
    _table("icustays", "subject_id:int!, hadm_id:int!, stay_id:int!, first_careunit:str, last_careunit:str, "
           "intime:ts!, outtime:ts", [("stay_id",)], [_SUBJ, _HADM]),
    _table("chartevents", "subject_id:int!, hadm_id:int!, stay_id:int!, charttime:ts!, itemid:int!, "
           "valuenum:float!, valueuom:str!", (), [_SUBJ, _HADM, _STAY, _ITEM]),
    _table("inputevents", "subject_id:int!, hadm_id:int!, stay_id:int!, starttime:ts!, itemid:int!, "
           "amount:float!", (), [_SUBJ, _HADM, _STAY, _ITEM]),
    _table("outputevents", "subject_id:int!, hadm_id:int!, stay_id:int!, charttime:ts!, itemid:int!, "
           "value:float!", (), [_SUBJ, _HADM, _STAY, _ITEM]),
    _table("microbiologyevents", "subject_id:int!, hadm_id:int!, charttime:ts!, spec_type_desc:str, "
           "test_name:str, org_name:str", (), [_SUBJ, _HADM]),
    _table("transfers", "subject_id:int!, hadm_id:int!, transfer_id:int!, eventtype:str, careunit:str, "
           "intime:ts!, outtime:ts", [("transfer_id",)], [_SUBJ, _HADM]),
    _table("tb_cxr", "subject_id:int!, hadm_id:int, study_id:int!, image_id:str!, viewposition:str!, "
           "studydatetime:ts!", [("study_id",), ("image_id",)], [_SUBJ, _HADM]),
)
ANSWER_TABLE = _table(
    "tb_cxr_plus", "subject_id:int!, hadm_id:int, study_id:int!, image_id:str!, viewposition:str!, "
    "studydatetime:ts!, studyorder:int!, object:str!, relation:int!, attribute:str!, category:str!, "
    "ct_ratio:float, mt_ratio:float", [("image_id", "object", "attribute")],
    indexes=[("study_id", "relation"), ("subject_id",)])

BY_NAME: dict[str, Table] = {t.name: t for t in (*TABLES, ANSWER_TABLE)}
MIMIC_TABLES = tuple(t.name for t in TABLES if t.name != "tb_cxr")  # the 17 MIMIC-IV-derived tables


def create_sql(table: Table, dialect: str, qualified: str | None = None) -> str:
    """CREATE TABLE statement of ``table`` for ``dialect`` ('duckdb' or 'sqlite')."""
    types = DUCKDB_TYPES if dialect == "duckdb" else SQLITE_TYPES
    lines = []
    for c in table.columns:
        extra = " NOT NULL" if c.not_null else ""
        if c.name == "row_id":
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
