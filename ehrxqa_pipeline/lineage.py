"""Lineage stated once and checked against what the steps run: a statement log of the warehouse, the tables
each statement reads and writes (parsed with sqlglot), and the check that every step reads only the tables of
its own assets and of the assets it declares as deps.

Recording: ``RecordingConnection`` wraps a DuckDB connection and appends every statement it runs to a JSON
Lines file, one object per statement with the step that ran it (``resources.Warehouse(statement_log=...)``).
Parsing: ``parse_statement`` (sqlglot, DuckDB dialect): the tables a statement reads and writes, CTEs left
out. Checking: ``undeclared_reads(records, declared)``, ``declared`` = asset or check key -> the asset keys its
step may read; a table resolves to the asset that writes it with ``catalog()``: the data contracts, which name
the asset of every table (data_contracts/README.md), so the lineage is stated there once.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ehrxqa_pipeline import names
from ehrxqa_pipeline.contracts import all_contracts
from ehrxqa_pipeline.ehr.config import WHICH, schemas


class StatementLog:
    """Appends ``{**step, "connection": id, "kind": kind, "text": text}`` as one JSON line per statement to
    ``path`` (created with its folder). ``step`` names what ran it: run id, step name, asset and check keys,
    partition; ``connection`` tells the connections of a step apart (USE and temporary tables are theirs)."""

    _lock = threading.Lock()  # a cursor may run in another thread of the step

    def __init__(self, path: Path, step: Mapping):
        self.path, self.step = Path(path), dict(step)
        self.connection = uuid.uuid4().hex[:8]
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str, text: str) -> None:
        line = json.dumps({**self.step, "connection": self.connection, "kind": kind, "text": text}) + "\n"
        with self._lock, self.path.open("a") as f:
            f.write(line)

    def another(self) -> StatementLog:
        """The log of another connection of the same step (a cursor)."""
        return StatementLog(self.path, self.step)


def read_log(path: Path) -> list[dict]:
    """The records of a statement log, in the order they were written."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line]


class RecordingConnection:
    """A DuckDB connection that logs every statement before it runs it (``execute``, ``executemany``, ``sql``,
    ``query``, ``table``) and the names of the frames it registers; its cursors do the same. Everything else
    is the wrapped connection's."""

    def __init__(self, con: duckdb.DuckDBPyConnection, log: StatementLog):
        self._con, self._log = con, log

    def execute(self, query, *args, **kwargs):
        self._log.write("sql", str(query))
        return self._chained(self._con.execute(query, *args, **kwargs))

    def executemany(self, query, *args, **kwargs):
        self._log.write("sql", str(query))
        return self._chained(self._con.executemany(query, *args, **kwargs))

    def _chained(self, result):
        """DuckDB's execute returns the connection itself: this one, so that a chained execute is logged too."""
        return self if result is self._con else result

    def sql(self, query, *args, **kwargs):
        self._log.write("sql", str(query))
        return self._con.sql(query, *args, **kwargs)

    def query(self, query, *args, **kwargs):
        self._log.write("sql", str(query))
        return self._con.query(query, *args, **kwargs)

    def table(self, name: str):
        self._log.write("sql", f"SELECT * FROM {name}")
        return self._con.table(name)

    def register(self, name: str, frame):
        self._log.write("register", name)
        return self._con.register(name, frame)

    def cursor(self) -> RecordingConnection:
        return RecordingConnection(self._con.cursor(), self._log.another())

    def __enter__(self) -> RecordingConnection:
        return self

    def __exit__(self, *exc) -> None:
        self._con.__exit__(*exc)

    def __getattr__(self, name: str):
        return getattr(self._con, name)


# -- what one statement reads and writes --------------------------------------------------------------------

@dataclass(frozen=True)
class Statement:
    """The tables of one SQL statement, lower case, as written: ``table``, ``schema.table`` or
    ``catalog.schema.table`` (CTE names are not tables)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()  # created, filled, changed or renamed (not temporary ones)
    temporary: frozenset[str] = frozenset()  # temporary tables created
    dropped: frozenset[str] = frozenset()  # DROP TABLE / VIEW
    dropped_schemas: frozenset[str] = frozenset()
    files: tuple[str, ...] = ()  # files read: read_csv('...') and the like, FROM 'x.csv', COPY t FROM '...'
    attached: str | None = None  # ATTACH '...' AS alias: a database file outside the warehouse
    use: str | None = None  # USE catalog.schema (or USE name): the default for unqualified names


def _name(table: exp.Table) -> str:
    return ".".join(p.lower() for p in (table.catalog, table.db, table.name) if p)


def _target(node: exp.Expression | None) -> exp.Table | None:
    """The table of a statement's target (``CREATE TABLE t (columns)`` wraps it in a Schema)."""
    if isinstance(node, exp.Schema):
        node = node.this
    return node if isinstance(node, exp.Table) else None


def _function_name(func: exp.Func) -> str:
    return (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()


def _reads_file(func: exp.Func) -> bool:
    """A table function that reads files: read_csv, read_parquet, read_json..., parquet_scan, sqlite_scan..."""
    name = _function_name(func)
    return name.startswith("read_") or name.endswith("_scan")


def _first_string(node: exp.Expression) -> str:
    literal = next((x for x in node.find_all(exp.Literal) if x.is_string), None)
    return literal.this if literal is not None else node.sql("duckdb")


def _targets(st: exp.Expression) -> tuple[list[exp.Table], bool]:
    """The tables ``st`` writes, and whether it creates them temporary."""
    if isinstance(st, exp.Create):
        if st.args.get("kind") == "INDEX":
            return [t for t in [_target(st.this.args.get("table"))] if t is not None], False
        temporary = any(isinstance(p, exp.TemporaryProperty) for p in st.find_all(exp.TemporaryProperty))
        temporary = temporary or (_target(st.this) is not None and _target(st.this).db.lower() == "temp")
        return [t for t in [_target(st.this)] if t is not None and t.name], temporary
    if isinstance(st, exp.Alter):  # ALTER TABLE s.t RENAME TO u renames it to s.u: both are written
        target = _target(st.this)
        for renamed in [t for t in st.find_all(exp.Table) if t is not target]:
            renamed.set("db", target.args.get("db"))
            renamed.set("catalog", target.args.get("catalog"))
        return list(st.find_all(exp.Table)), False
    if isinstance(st, exp.Copy):
        return ([_target(st.this)] if st.args.get("kind") else []), False  # kind True: COPY t FROM file
    if isinstance(st, (exp.Insert, exp.Delete, exp.Update)):
        return [t for t in [_target(st.this)] if t is not None], False
    return [], False


def parse_statement(sql: str) -> Statement:
    """What ``sql`` (DuckDB; one statement or several) reads and writes. Raises ``sqlglot.ParseError`` when it
    does not parse."""
    out = Statement()
    for st in sqlglot.parse(sql, read="duckdb"):
        if st is not None:
            out = _merge(out, _one(st))
    return out


def _merge(a: Statement, b: Statement) -> Statement:
    return Statement(a.reads | b.reads, a.writes | b.writes, a.temporary | b.temporary, a.dropped | b.dropped,
                     a.dropped_schemas | b.dropped_schemas, a.files + b.files, b.attached or a.attached,
                     b.use or a.use)


def _one(st: exp.Expression) -> Statement:
    if isinstance(st, exp.Use):
        return Statement(use=_name(st.this))
    if isinstance(st, exp.Attach):  # without AS, DuckDB names the database after the file
        alias = st.this.alias if isinstance(st.this, exp.Alias) else Path(_first_string(st.this)).stem
        return Statement(attached=alias.lower())
    if isinstance(st, exp.Drop) and st.args.get("kind") == "SCHEMA":
        schema = st.find(exp.Table)  # the schema name is the table's db part
        return Statement(dropped_schemas=frozenset({".".join(p.lower() for p in (schema.catalog, schema.db) if p)}))
    if isinstance(st, exp.Drop) and st.args.get("kind") in ("TABLE", "VIEW"):
        return Statement(dropped=frozenset(_name(t) for t in st.args.get("tables") or ()))
    if isinstance(st, exp.Create) and st.args.get("kind") == "SCHEMA" or isinstance(st, exp.Detach):
        return Statement()
    targets, temporary = _targets(st)
    ctes = {cte.alias_or_name.lower() for cte in st.find_all(exp.CTE)}
    reads, files = set(), []
    for table in st.find_all(exp.Table):
        if any(table is t for t in targets):
            continue
        if isinstance(table.this, exp.Func):
            if _reads_file(table.this):
                files.append(_first_string(table.this))
        elif not table.db and table.this.args.get("quoted") and ("/" in table.name or "." in table.name):
            files.append(table.name)  # FROM 'path/x.csv': DuckDB reads the file
        elif table.name and not (not table.db and table.name.lower() in ctes):
            reads.add(_name(table))
    if isinstance(st, exp.Copy) and st.args.get("kind"):
        files += [_first_string(f) for f in st.args.get("files") or ()]
    written = {_name(t) for t in targets}
    return Statement(reads=frozenset(reads), writes=frozenset() if temporary else frozenset(written),
                     temporary=frozenset(written) if temporary else frozenset(), files=tuple(files))


# -- the catalog: which asset writes which table -------------------------------------------------------------

def catalog() -> dict[str, tuple[str, ...]]:
    """Table (schema.name) -> the asset keys that write it, from the data contracts (a table both cohorts'
    step writes names both), and the EHR databases' build workspaces (``schema.*``; not contracted)."""
    out: dict[str, tuple[str, ...]] = {}
    for contract in all_contracts():
        for asset, table in contract.tables:
            out[table] = (*out.get(table, ()), asset)
    return out | {f"{schemas(w)[2]}.*": (f"{names.EHR_DB}/{w}",) for w in WHICH}


def table_assets(table: str, tables: Mapping[str, tuple[str, ...]], assets: set[str]) -> tuple[str, ...]:
    """The asset keys that write ``table`` (schema.name, lower case): from ``tables`` (``catalog()``), else by
    the naming convention, asset [group, name] of ``assets`` writing group.name and group.name_rejected (the
    ingested tables' quarantines; a graph without contracts, as in the tests); () when none does."""
    schema, _, name = table.partition(".")
    found = tables.get(table) or tables.get(f"{schema}.*")
    if found:
        return found
    if f"{schema}/{name}" in assets:
        return (f"{schema}/{name}",)
    base = name.removesuffix(names.rejected(""))
    return table_assets(f"{schema}.{base}", tables, assets) if base != name else ()


# -- the check: each step reads only its own tables and those of its declared deps ----------------------------

SYSTEM_SCHEMAS = frozenset({"information_schema", "pg_catalog"})  # DuckDB's catalog views: no asset's data
SHOWN = 160  # characters of a statement shown in a finding


@dataclass(frozen=True)
class Finding:
    """One statement of a step that breaks the lineage: ``kind`` undeclared (reads a table of an asset it does
    not declare), unknown (reads a table the catalog does not know), foreign_write (writes another asset's
    table), unlisted_write (leaves a table the catalog does not know), file (reads a file outside the file
    groups), unparsed (sqlglot could not parse it)."""

    step: str  # the step's asset keys (or check keys), comma separated
    kind: str
    table: str  # schema.table, a file path, or "" (unparsed)
    owners: tuple[str, ...]  # the assets that write ``table`` (undeclared, foreign_write)
    statement: str

    def __str__(self) -> str:
        owners = ", ".join(self.owners)
        fix = {
            "undeclared": f"reads {self.table}, a table of {owners}, which it does not declare: declare "
                          f"deps=[{owners}] on it, or read the table of an asset it declares",
            "unknown": f"reads {self.table}, which no asset writes: give the table a data contract naming the "
                       f"asset that writes it (data_contracts/{self.table}.yaml), or read that asset's table",
            "foreign_write": f"writes {self.table}, a table of {owners}: only {owners} may write it; write a "
                             f"table of its own (ehrxqa_pipeline.names)",
            "unlisted_write": f"leaves {self.table}, which no data contract names: add "
                              f"data_contracts/{self.table}.yaml naming its asset, or drop it in the step (scratch)",
            "file": f"reads the file {self.table} in SQL, which only the source and ingest groups do: read the "
                    f"table of the ingest asset instead",
            "unparsed": "runs a statement sqlglot cannot parse, so its reads are unknown: split or simplify it",
        }[self.kind]
        return f"{self.step} {fix}. Statement: {self.statement}"


@dataclass
class _Step:
    """What one step did, gathered over its statements in order."""

    assets: tuple[str, ...]
    checks: tuple[str, ...]
    statements: list[tuple[str, str, Statement | None]] = field(default_factory=list)  # (connection, text, parsed)
    registered: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return ", ".join(self.assets or self.checks)


def _steps(records: Iterable[Mapping]) -> Iterator[_Step]:
    """The statements of ``records`` per step (run, step, partition), in order; records of no step are left
    out."""
    steps: dict[tuple, _Step] = {}
    for r in records:
        if r.get("step") is None:
            continue
        step = steps.setdefault((r["run"], r["step"], r.get("partition")),
                                _Step(tuple(r["assets"]), tuple(r["checks"])))
        if r["kind"] == "register":
            step.registered.add(r["text"].lower())
            continue
        try:
            parsed = parse_statement(r["text"])
        except SqlglotError:
            parsed = None
        step.statements.append((r.get("connection", ""), r["text"], parsed))
    return iter(steps.values())


def _short(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= SHOWN else one_line[:SHOWN - 3] + "..."


class _Names:
    """Resolves the table names of one step's statements to warehouse tables (schema.table), following each
    connection's USE and leaving out attached databases, temporary tables, registered frames and DuckDB's
    catalog views."""

    def __init__(self, step: _Step):
        self.attached = {s.attached for _, _, s in step.statements if s and s.attached}
        self.outside = self.attached | {"temp", "system"}  # catalogs that are not the warehouse
        self.local = step.registered | {t for _, _, s in step.statements if s for t in s.temporary}
        self.use: dict[str, tuple[str, str]] = {}  # connection -> (catalog, schema) of USE

    def follow(self, connection: str, st: Statement) -> None:
        if st.use:
            first, _, rest = st.use.partition(".")
            self.use[connection] = (first, rest or "main") if rest or first in self.attached else ("", first)

    def tables(self, connection: str, written: Iterable[str]) -> set[str]:
        """The warehouse tables among names as written in a statement of ``connection``."""
        return {t for name in written if (t := self.table(connection, name))}

    def table(self, connection: str, name: str) -> str | None:
        """``name`` as schema.table of the warehouse; None when it is not a warehouse table."""
        parts = name.split(".")
        if len(parts) == 1 and name in self.local:
            return None
        catalog, schema = self.use.get(connection, ("", "main"))
        if len(parts) == 3:
            catalog, schema = parts[0], parts[1]
        elif len(parts) == 2:  # catalog.table (default schema) or schema.table
            catalog, schema = (parts[0], "main") if parts[0] in self.outside else (catalog, parts[0])
        if catalog in self.outside or schema in SYSTEM_SCHEMAS:
            return None
        return f"{schema}.{parts[-1]}"


def undeclared_reads(records: Iterable[Mapping], declared: Mapping[str, Iterable[str]],
                     file_groups: Iterable[str] = (names.SOURCES, names.INGEST),
                     tables: Mapping[str, tuple[str, ...]] | None = None) -> list[Finding]:
    """Every way the steps of ``records`` (a statement log) break the lineage, once per step, kind and table
    (``Finding``, with the first statement). ``declared``: for every asset key and check key (user strings) the
    asset keys its step may read: an asset's own key and deps; a check's asset and additional deps. Tables
    resolve to their assets with ``table_assets`` over ``tables`` (default ``catalog()``); the tables a step
    writes itself (its scratch tables among them) are its own to read. Files may be read in SQL by the assets
    of ``file_groups`` only."""
    declared = {k: frozenset(v) for k, v in declared.items()}
    assets = {k for k in declared if ":" not in k}  # a check key is asset:check
    owners_of = partial(table_assets, tables=catalog() if tables is None else tables, assets=assets)
    out: dict[tuple, Finding] = {}
    for step in _steps(records):
        may_read = {a for k in (*step.assets, *step.checks) for a in declared.get(k, ())}
        reads_files = all(k.split("/")[0] in set(file_groups) for k in (*step.assets, *step.checks))
        for f in _check_step(step, owners_of, may_read, reads_files):
            out.setdefault((f.step, f.kind, f.table), f)
    return list(out.values())


def _check_step(step: _Step, owners_of: Callable[[str], tuple[str, ...]], may_read: set[str],
                reads_files: bool) -> list[Finding]:
    resolve, own = _Names(step), set(step.assets)
    written, dropped, out, left = set(), set(), [], {}
    for connection, text, st in step.statements:
        def finding(kind: str, table: str, owners: tuple[str, ...] = ()) -> Finding:
            return Finding(step.name, kind, table, owners, _short(text))

        if st is None:
            out.append(finding("unparsed", ""))
            continue
        resolve.follow(connection, st)
        reads, writes, drops = (resolve.tables(connection, n) for n in (st.reads, st.writes, st.dropped))
        for table in sorted(reads - written):
            owners = owners_of(table)
            if not owners:
                out.append(finding("unknown", table))
            elif not set(owners) <= may_read:
                out.append(finding("undeclared", table, tuple(o for o in owners if o not in may_read)))
        for table in sorted(writes | drops):
            owners = owners_of(table)
            if owners and not set(owners) <= own:
                out.append(finding("foreign_write", table, owners))
            elif not owners and table in writes:
                left.setdefault(table, finding("unlisted_write", table))
        written |= writes
        dropped |= drops | {f"{schema}.*" for schema in st.dropped_schemas}
        if not reads_files:
            out += [finding("file", path) for path in st.files]
    # a table the catalog does not know is scratch when the step drops it (or its schema) again
    return out + [f for table, f in left.items() if table not in dropped and f"{table.split('.')[0]}.*" not in dropped]


def recorded_keys(records: Iterable[Mapping]) -> set[str]:
    """The asset and check keys of the steps that ran at least one statement."""
    return {k for r in records if r.get("step") is not None and r["kind"] == "sql"
            for k in (*r["assets"], *r["checks"])}
