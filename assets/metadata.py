"""Materialization metadata from the warehouse: row count, column schema and a content data version.

Every table-backed asset reports ``dagster/row_count`` and ``dagster/column_schema`` (the UI's schema tab,
``build_column_schema_change_checks``) from the DuckDB table it wrote, and a data version that is its code
version plus an order-independent hash of its tables' contents: an asset that is re-materialized with the
same content keeps its data version, so the automation conditions (assets/automation.py) stop the cascade
there instead of re-running everything downstream.
"""

from collections.abc import Iterable, Mapping

import dagster as dg
import duckdb

from ehrxqa_pipeline.contracts import Contract
from ehrxqa_pipeline.hashing import combine
from ehrxqa_pipeline.warehouse import content_digest


def check_results(outcomes: Mapping[str, tuple[bool, object]]) -> list[dg.AssetCheckResult]:
    """The results of checks declared with an asset, from check name -> the library's ``(passed, details)``."""
    return [dg.AssetCheckResult(check_name=name, passed=bool(passed), metadata={"details": dg.MetadataValue.json(details)})
            for name, (passed, details) in outcomes.items()]


def table_metadata(con: duckdb.DuckDBPyConnection, table: str) -> dict:
    """``dagster/row_count`` and ``dagster/column_schema`` (from DESCRIBE) of ``table``: a table name or a
    parenthesised query (e.g. one partition of a table)."""
    columns = con.execute(f"DESCRIBE SELECT * FROM {table}").fetchall()
    rows = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    schema = dg.TableSchema(columns=[
        dg.TableColumn(name, dtype, constraints=None if nullable == "YES" else dg.TableColumnConstraints(nullable=False))
        for name, dtype, nullable, *_ in columns])
    return {"dagster/row_count": int(rows), "dagster/column_schema": schema}


def contract_schema(contract: Contract) -> dg.TableSchema:
    """``dagster/column_schema`` from a data contract: each column's DuckDB type, its ``why`` as the
    description, nullability, single-column uniqueness, allowed values and range; the keys as table
    constraints."""
    keys = [("primary key", contract.primary_key), *(("unique", u) for u in contract.unique)]
    single = {cols[0] for _, cols in keys if len(cols) == 1}

    def rules(c) -> list[str]:
        return ([f"allowed: {', '.join(map(str, c.allowed))}"] if c.allowed is not None else []) + \
            [f"{k} {v}" for k, v in (("min", c.min), ("max", c.max)) if v is not None]

    return dg.TableSchema(
        columns=[dg.TableColumn(c.name, c.duckdb_type, description=c.why, constraints=dg.TableColumnConstraints(
            nullable=c.nullable, unique=c.name in single, other=rules(c))) for c in contract.columns],
        constraints=dg.TableConstraints(other=[f"{kind} ({', '.join(cols)})" for kind, cols in keys if cols]))


def code_version(context: dg.AssetExecutionContext, key: dg.AssetKey | None = None) -> str:
    """The code version of ``key`` (default: the asset being materialized) in the running definitions."""
    key = key or context.asset_key
    return context.assets_def.code_versions_by_key.get(key) or ""


def table_result(context: dg.AssetExecutionContext, con: duckdb.DuckDBPyConnection, table: str, *,
                 tables: Iterable[str] = (), asset_key: dg.AssetKey | None = None,
                 metadata: dict | None = None, check_results: Iterable[dg.AssetCheckResult] = ()
                 ) -> dg.MaterializeResult:
    """The MaterializeResult of an asset stored as ``table`` (plus ``tables`` it also writes, e.g. its
    ``*_rejected`` table): row count and column schema of ``table``, ``metadata``, ``check_results`` of checks
    declared with the asset, and a data version = code version + content digest of all of them."""
    key = asset_key or context.asset_key
    digest = content_digest(con, [table, *tables])
    return dg.MaterializeResult(
        asset_key=asset_key, data_version=dg.DataVersion(combine(code_version(context, key), digest)),
        metadata={**table_metadata(con, table), **(metadata or {})}, check_results=list(check_results) or None)


def records_metadata(records: list[dict]) -> dict:
    """``dagster/row_count`` and ``dagster/column_schema`` of file outputs (release JSON records, statistics
    tables): one row per record, columns and types from the records' fields in first-seen order."""
    from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import field_types

    return schema_metadata(len(records), field_types(records))


def schema_metadata(rows: int, types: Mapping[str, str]) -> dict:
    """``records_metadata`` from the row count and the field types (``records.field_types``)."""
    schema = dg.TableSchema(columns=[dg.TableColumn(name, dtype) for name, dtype in types.items()])
    return {"dagster/row_count": rows, "dagster/column_schema": schema}


def written(*paths) -> dict:
    """``{"written": [...]}``: files a step wrote that its other metadata does not name (its ``path`` values name the
    rest). `ehrxqa build --changed` writes again what a materialization names when it is gone or changed since
    (``freshness.damaged_outputs``), so every file an asset writes under EHRXQA_HOME is named by one of them."""
    return {"written": dg.MetadataValue.json(sorted(str(p) for p in paths))}
