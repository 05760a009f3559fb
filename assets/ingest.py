"""Ingestion assets: each PhysioNet table typed into DuckDB (ingest.<table>), refused rows quarantined.

One asset per data contract in data_contracts/ingest.*.yaml; the contract states the grain and the rules.
"""


import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.metadata import code_version as running_code_version
from assets.metadata import table_metadata
from assets.sources import HASH_CACHE, SOURCE_FILE_FIELD, SOURCE_KEYS, SOURCE_VERSION_FIELD
from ehrxqa_pipeline import names
from ehrxqa_pipeline.contracts import CONTRACTS_DIR, Contract, load_contract
from ehrxqa_pipeline.hashing import (CHANGED_WHILE_READ, WAIT_FOR_IT, FileChangedError, HashCache, combine,
                                     file_digest, stat_key, unchanged_since)
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.files import origin
from resources import PipelineConfig, Warehouse

INGEST_VERSION = "2"  # bump when ingest_table's behaviour changes (2: out-of-scope rows counted apart)

CONTRACTS: list[Contract] = [load_contract(p.stem.replace(".", "/"))
                             for p in sorted(CONTRACTS_DIR.glob(f"{names.INGEST}.*.yaml"))]


def ingest_key(table: str) -> dg.AssetKey:
    return dg.AssetKey([names.INGEST, table])


def _ingest_asset(contract: Contract) -> dg.AssetsDefinition:
    table = contract.table
    code_version = f"{INGEST_VERSION}-{file_digest(contract.path)[:8]}"  # a contract edit re-runs the asset

    @dg.asset(key=ingest_key(table), group_name=names.INGEST, deps=[SOURCE_KEYS[table]],
              code_version=code_version, automation_condition=ON_CHANGE, pool=DUCKDB_POOL,
              op_tags=DUCKDB_TAGS, kinds={"duckdb", "polars"}, owners=["team:ehrxqa"],
              description=f"{contract.grain.capitalize()}. Grain: {contract.grain}. Source: "
                          f"SOURCE_ROOT/{contract.source_file}. Refused rows: {names.INGEST}."
                          f"{names.rejected(table)} with a reason (bad input, or out_of_scope:<rule>).",
              metadata={"table": f"{names.INGEST}.{table}", "contract": str(contract.path.name)})
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
               warehouse: Warehouse) -> dg.MaterializeResult:
        settings = pipeline_config.settings()
        context.log.info(f"{table}: reading SOURCE_ROOT/{contract.source_file} into {names.INGEST}.{table}")
        layout = settings.layout()
        try:
            # The version read is the one hashed here, before the read; a file that changes until the read
            # ends (stat before and after: size, mtime, ctime, inode) fails the step instead of being
            # recorded under a version it is not (release/manifest takes the source versions from here).
            path = origin(layout, table)
            before = stat_key(path.stat()) if path.exists() else None
            source_digest = HashCache(settings.cache_dir / HASH_CACHE).digest(path) if before else None
            with warehouse.connect() as con:
                result = ingest_table(con, layout, contract, settings.staging_dir, settings.cache_dir)
                if before is not None:
                    unchanged_since(path, before)
                schema = table_metadata(con, f"{names.INGEST}.{table}")
        except SourceError as e:
            raise dg.Failure(description=str(e)) from None
        except FileChangedError as e:
            raise dg.Failure(description=f"{table}: SOURCE_ROOT/{layout.relative(path)} {CHANGED_WHILE_READ} "
                                         f"(size, mtime, ctime or inode differ after the read); nothing was "
                                         f"ingested: {WAIT_FOR_IT}") from None
        if source_digest is None:  # ingest_table read it, so it exists now: it appeared during the read
            raise dg.Failure(description=f"{table}: SOURCE_ROOT/{layout.relative(path)} appeared while it was "
                                         "read; build again once it is complete")
        context.log.info(f"{table}: {result.rows} rows kept, {result.rejected} quarantined {result.reasons}"
                         + (f", {result.out_of_scope_rows} out of scope {result.out_of_scope}"
                            if result.out_of_scope else ""))
        if result.quoting:
            context.log.warning(f"{table}: {result.quoting}")
        return dg.MaterializeResult(
            data_version=dg.DataVersion(combine(source_digest, running_code_version(context))),
            metadata={
                **schema,
                "source_rows": result.source_rows,
                "rejected_rows": result.rejected,
                "rejected_by_reason": dg.MetadataValue.json(result.reasons),
                "out_of_scope_rows": result.out_of_scope_rows,
                "out_of_scope_by_reason": dg.MetadataValue.json(result.out_of_scope),
                "quoting": "literal: " + result.quoting if result.quoting else "standard",
                # what release/manifest and the datasheet record as the source version this build read
                SOURCE_VERSION_FIELD: combine(source_digest),
                SOURCE_FILE_FIELD: layout.canonical(path),
            })

    return _asset


INGEST_ASSETS = [_ingest_asset(c) for c in CONTRACTS]
