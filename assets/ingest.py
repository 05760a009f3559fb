"""Ingestion assets: each PhysioNet table typed into DuckDB (ingest.<table>), refused rows quarantined.

One asset per data contract in data_contracts/ingest.*.yaml; the contract states the grain and the rules.
"""


import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.metadata import code_version as running_code_version
from assets.metadata import table_metadata
from assets.sources import SOURCE_KEYS
from ehrxqa_pipeline import names
from ehrxqa_pipeline.contracts import CONTRACTS_DIR, Contract, load_contract
from ehrxqa_pipeline.hashing import HashCache, combine, file_digest
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
                          f"SOURCE_ROOT/{contract.source}. Refused rows: {names.INGEST}."
                          f"{names.rejected(table)} with a reason (bad input, or out_of_scope:<rule>).",
              metadata={"table": f"{names.INGEST}.{table}", "contract": str(contract.path.name)})
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
               warehouse: Warehouse) -> dg.MaterializeResult:
        settings = pipeline_config.settings()
        context.log.info(f"{table}: reading SOURCE_ROOT/{contract.source} into {names.INGEST}.{table}")
        try:
            with warehouse.connect() as con:
                result = ingest_table(con, settings.layout(), contract, settings.staging_dir,
                                      settings.cache_dir)
                schema = table_metadata(con, f"{names.INGEST}.{table}")
            source_digest = HashCache(settings.cache_dir / "source_hashes.json").digest(
                origin(settings.layout(), table))
        except SourceError as e:
            raise dg.Failure(description=str(e)) from None
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
            })

    return _asset


INGEST_ASSETS = [_ingest_asset(c) for c in CONTRACTS]
