"""EHRXQA integrated databases (silver for training/validation questions, gold for test) and their
answer sheets, exported as DuckDB and SQLite (mimic_iv_cxr.db), each with its Spider-format tables.json."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.metadata import table_result
from assets.cxr_labels import GOLD_LATER_KEY, LABEL_KEYS
from assets.ingest import ingest_key
from assets.splits import COHORT_KEYS, SPLIT_KEYS
from ehrxqa_pipeline import names
from ehrxqa_pipeline.ehr.build import build_database
from ehrxqa_pipeline.ehr.checks import run_checks
from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.ehr.export import export_database
from ehrxqa_pipeline.sources.images import images_dir
from ehrxqa_pipeline.sources.schema import MIMICIV_FILES
from resources import PipelineConfig, Warehouse

DB_KEYS = {w: dg.AssetKey([names.EHR_DB, w]) for w in ("silver", "gold")}
CHECKS = {
    "keys": "Primary keys unique, foreign keys resolve (database and answer sheet).",
    "time_bounds": "Every timestamp inside [2100-01-01, current time 2105-12-31 23:59:00].",
    "current_patients": "Exactly round(ratio x patients) current patients, each with its latest admission open.",
    "ages": "Admission ages 11-89 and consistent with dob.",
    "images_present": "Every TB_CXR image has its JPEG in the image tree (skipped without one).",
    "answer_sheet": "TB_CXR_PLUS has exactly one row per TB_CXR image x possible pair.",
}


def database_dir(settings, which: str):
    return settings.release_dir / "ehrxqa" / "databases" / which


def _db_asset(which: str) -> dg.AssetsDefinition:
    key = DB_KEYS[which]
    images = "the MIMIC-CXR-VQA valid split" if which == "silver" else "the gold cohort (all studies of gold patients)"

    @dg.asset(key=key, group_name=names.EHR_DB, code_version="3", automation_condition=ON_CHANGE,
              deps=[SPLIT_KEYS[which], COHORT_KEYS[which], LABEL_KEYS[which],
                    *(ingest_key(t.name) for t in MIMICIV_FILES), ingest_key("silver_bbox"),
                    # the gold database's later studies: their labels refined from the RAW silver relations
                    *([GOLD_LATER_KEY] if which == "gold" else [])],
              pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb", "sqlite"},
              check_specs=[dg.AssetCheckSpec(n, asset=key, blocking=True, description=d) for n, d in CHECKS.items()],
              description=f"Grain: one database of 17 MIMIC-IV tables + TB_CXR (one row per study) for the "
                          f"patients sampled from {images}, time-shifted into 2100-2105, plus its answer sheet "
                          f"TB_CXR_PLUS (one row per image x possible pair) kept apart. Source: ingest.* (MIMIC-IV, "
                          f"boxes), cxr_cohort.{which}, cxr_labels.{which}, splits.{which}"
                          f"{', cxr_labels.gold_later (the later studies)' if which == 'gold' else ''}. "
                          "Files: EHRXQA_HOME/release/ehrxqa/databases/"
                          f"{which}/mimic_iv_cxr.{{duckdb,db}} and tables.json (its schema in Spider's format); "
                          "answer sheet under EHRXQA_HOME/answer_sheets/.")
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
        settings = pipeline_config.settings()
        config = DbConfig()
        files = images_dir(settings.layout()) if settings.check_images else None
        with warehouse.connect() as con:
            context.log.info(f"{which}: sampling patients and building the 17 tables + TB_CXR")
            result = build_database(con, which, config, seed=settings.seed)
            for message in result.messages:
                context.log.warning(message)
            context.log.info(f"{which}: running {len(CHECKS)} checks")
            checks = run_checks(con, result, config, files_dir=files)
            context.log.info(f"{which}: exporting to DuckDB and SQLite under {database_dir(settings, which)}")
            export = export_database(con, result.schema, result.answers_schema, database_dir(settings, which),
                                     answers_dir=settings.home / "answer_sheets" / which)
            context.log.info(f"{which}: exported {sum(export.rows.values())} rows in {len(export.rows)} tables")
            tables = [f"{s}.{t}" for s, t in con.execute(
                "SELECT schema_name, table_name FROM duckdb_tables() WHERE schema_name IN (?, ?) ORDER BY 1, 2",
                [result.schema, result.answers_schema]).fetchall()]
            materialized = table_result(context, con, f"{result.schema}.tb_cxr", tables=tables, metadata={
                **{k: v for k, v in result.metadata().items() if v is not None},
                "dagster/row_count": sum(export.rows.values()),
                "rows_per_table": dg.MetadataValue.json(dict(sorted(export.rows.items()))),
                "sqlite": dg.MetadataValue.path(str(export.sqlite_path)),
                "duckdb": dg.MetadataValue.path(str(export.duckdb_path)),
                "tables_json": dg.MetadataValue.path(str(export.tables_json_path)),
                "sqlite_sha256": export.sqlite_sha256})
        yield materialized
        for name, (passed, details) in checks.items():
            yield dg.AssetCheckResult(check_name=name, passed=bool(passed),
                                      metadata={"details": dg.MetadataValue.json(details)})

    return _asset


EHR_DB_ASSETS = [_db_asset("silver"), _db_asset("gold")]
