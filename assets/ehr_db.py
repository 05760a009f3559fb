"""EHRXQA integrated databases (silver for training/validation questions, gold for test), exported as DuckDB
and SQLite (mimic_iv_cxr.db), each with its Spider-format tables.json, and their answer sheets (TB_CXR_PLUS),
each an asset of its own: a label edit rebuilds the answer sheet, the database only when which images are
labelled changed (issue 23)."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.freshness import latest_data_version
from assets.metadata import check_results, content_digest, table_result
from assets.cxr_labels import GOLD_LATER_KEY, LABEL_KEYS, images_key
from assets.ingest import ingest_key
from assets.splits import COHORT_KEYS, SPLIT_KEYS
from ehrxqa_pipeline import names
from ehrxqa_pipeline.ehr.build import ANSWER_SHEET_CODE, answer_sheet_reads, build_answer_sheet, build_database, \
    kept_answer_sheet, kept_record
from ehrxqa_pipeline.ehr.checks import run_answer_sheet_checks, run_checks
from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.ehr.export import export_answer_sheet, export_database
from ehrxqa_pipeline.hashing import combine
from ehrxqa_pipeline.questions.ehrxqa.memo import ResultMemo
from ehrxqa_pipeline.sources.images import images_dir
from ehrxqa_pipeline.sources.schema import MIMICIV_FILES
from resources import PipelineConfig, Warehouse

DB_KEYS = {w: dg.AssetKey([names.EHR_DB, w]) for w in ("silver", "gold")}
BOXES_KEY = ingest_key("silver_bbox")  # the answer sheets' ratios (silver boxes)
ANSWER_MEMO = "answer_sheets.json"  # EHRXQA_HOME/cache/: what each answer sheet was built from
ANSWER_KEYS = {w: dg.AssetKey([names.EHR_DB, f"{w}_answers"]) for w in ("silver", "gold")}
CHECKS = {
    "keys": "Primary keys unique, foreign keys resolve.",
    "time_bounds": "Every timestamp inside [2100-01-01, current time 2105-12-31 23:59:00].",
    "current_patients": "Exactly round(ratio x patients) current patients, each with its latest admission open.",
    "ages": "Admission ages 11-89 and consistent with dob.",
    "images_present": "Every TB_CXR image has its JPEG in the image tree (skipped without one).",
}
ANSWER_CHECKS = {
    "keys": "Primary key unique, natural key (image, object, attribute) unique, nothing null that may not be.",
    "time_bounds": "Every timestamp inside [2100-01-01, current time 2105-12-31 23:59:00].",
    "one_row_per_image_pair": "TB_CXR_PLUS has exactly one row per TB_CXR image x possible pair, with TB_CXR's values.",
}
# What each database reads of the labels: which images have any (cxr_labels.<set>_images), never the labels
LABELLED = {"silver": [images_key(LABEL_KEYS["silver"])],
            "gold": [images_key(LABEL_KEYS["gold"]), images_key(GOLD_LATER_KEY)]}


def database_dir(settings, which: str):
    return settings.release_dir / "ehrxqa" / "databases" / which


def answer_sheet_dir(settings, which: str):
    """The answer sheet's files, outside the release: shipping the release never ships the answers."""
    return settings.home / "answer_sheets" / which


def _db_asset(which: str) -> dg.AssetsDefinition:
    key = DB_KEYS[which]
    images = "the MIMIC-CXR-VQA valid split" if which == "silver" else "the gold cohort (all studies of gold patients)"

    @dg.asset(key=key, group_name=names.EHR_DB, code_version="5", automation_condition=ON_CHANGE,
              deps=[COHORT_KEYS[which], *([SPLIT_KEYS["silver"]] if which == "silver" else []), *LABELLED[which],
                    *(ingest_key(t.name) for t in MIMICIV_FILES)],
              pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb", "sqlite"},
              check_specs=[dg.AssetCheckSpec(n, asset=key, blocking=True, description=d) for n, d in CHECKS.items()],
              description=f"Grain: one database of 17 MIMIC-IV tables + TB_CXR (one row per study) for the "
                          f"patients sampled from {images}, time-shifted into 2100-2105. Source: ingest.* "
                          f"(MIMIC-IV), cxr_cohort.{which}{', splits.silver' if which == 'silver' else ''} and "
                          f"which images have labels ({', '.join(k.to_user_string() for k in LABELLED[which])}; "
                          f"the labels themselves go to ehr_db/{which}_answers only). "
                          "Files: EHRXQA_HOME/release/ehrxqa/databases/"
                          f"{which}/mimic_iv_cxr.{{duckdb,db}} and tables.json (its schema in Spider's format).")
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
            export = export_database(con, result.schema, database_dir(settings, which))
            context.log.info(f"{which}: exported {sum(export.rows.values())} rows in {len(export.rows)} tables")
            tables = [f"{result.schema}.{t}" for (t,) in con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? ORDER BY 1", [result.schema]).fetchall()]
            materialized = table_result(context, con, f"{result.schema}.tb_cxr", tables=tables, metadata={
                **{k: v for k, v in result.metadata().items() if v is not None},
                "dagster/row_count": sum(export.rows.values()),
                "rows_per_table": dg.MetadataValue.json(dict(sorted(export.rows.items()))),
                "sqlite": dg.MetadataValue.path(str(export.sqlite_path)),
                "duckdb": dg.MetadataValue.path(str(export.duckdb_path)),
                "tables_json": dg.MetadataValue.path(str(export.tables_json_path)),
                "sqlite_sha256": export.sqlite_sha256})
        yield materialized
        yield from check_results(checks)

    return _asset


def _answer_sheet_asset(which: str) -> dg.AssetsDefinition:
    key = ANSWER_KEYS[which]
    labels = [LABEL_KEYS[which], *([GOLD_LATER_KEY, images_key(GOLD_LATER_KEY)] if which == "gold" else [])]

    @dg.asset(key=key, group_name=names.EHR_DB, code_version="1", automation_condition=ON_CHANGE,
              deps=[DB_KEYS[which], *labels, SPLIT_KEYS[which], BOXES_KEY],
              pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb", "sqlite"},
              check_specs=[dg.AssetCheckSpec(n, asset=key, blocking=True, description=d)
                           for n, d in ANSWER_CHECKS.items()],
              description=f"Grain: one row per TB_CXR image of ehr_db/{which} x possible (object, attribute) pair "
                          "(TB_CXR_PLUS, relation 0/1: the oracle's answers and the gold SQL's table), with the "
                          "image's ct/mt ratios; kept apart from the database. Source: ehr_db/"
                          f"{which} (TB_CXR), cxr_labels.{which}"
                          f"{' (the first studies) and cxr_labels.gold_later (the later ones)' if which == 'gold' else ''}"
                          f", splits.{which} and ingest.silver_bbox (the ratios). Files: EHRXQA_HOME/answer_sheets/"
                          f"{which}/tb_cxr_plus.{{duckdb,db}}.")
    def _asset(context: dg.AssetExecutionContext, warehouse: Warehouse, pipeline_config: PipelineConfig):
        settings = pipeline_config.settings()
        config, out = DbConfig(), answer_sheet_dir(settings, which)
        # kept (cache/answer_sheets.json) under the content of what the sheet reads: an EHR table edit rebuilds
        # the database, not what its answer sheet reads of it (TB_CXR), and the sheet is not built again
        memo = ResultMemo(settings.cache_dir / ANSWER_MEMO)
        with warehouse.connect() as con:
            inputs = combine(content_digest(con, answer_sheet_reads(which)), repr(config), ANSWER_SHEET_CODE,
                             latest_data_version(context.instance, BOXES_KEY) or "")
            kept = memo.get(which, inputs)
            found = kept_answer_sheet(con, which, kept, out) if kept is not None else None
            if found is not None:
                sheet, export = found
                context.log.info(f"the {which} answer sheet is the one built from these inputs: kept")
            else:
                sheet = build_answer_sheet(con, which, config)
                export = export_answer_sheet(con, sheet.schema, out)
                memo.put(which, inputs, kept_record(con, sheet))
            checks = run_answer_sheet_checks(con, sheet, config)
            materialized = table_result(context, con, f"{sheet.schema}.tb_cxr_plus", metadata={
                **sheet.metadata(), "sqlite": dg.MetadataValue.path(str(export.sqlite_path)),
                "duckdb": dg.MetadataValue.path(str(export.duckdb_path)), "sqlite_sha256": export.sqlite_sha256,
                "files": "written" if export.patched_rows is None else f"patched: {export.patched_rows} rows",
                "sheet": "built" if found is None else "kept (its inputs unchanged)"})
        yield materialized
        yield from check_results(checks)

    return _asset


EHR_DB_ASSETS = [_db_asset("silver"), _db_asset("gold"), _answer_sheet_asset("silver"), _answer_sheet_asset("gold")]
