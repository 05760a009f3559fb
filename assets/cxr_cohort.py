"""Image selection: rules per image, JPEG integrity per top folder (p10..p19), silver and gold cohorts."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.contract_checks import contract_check_result, contract_check_spec
from assets.metadata import table_result, written
from assets.ingest import ingest_key
from ehrxqa_pipeline import markdown, names
from ehrxqa_pipeline.cxr import downloads, selection
from ehrxqa_pipeline.hashing import combine
from ehrxqa_pipeline.cxr.integrity import CONTRACT as INTEGRITY_CONTRACT
from ehrxqa_pipeline.cxr.integrity import JPEG_FAILURES, candidates_sql, check_images
from ehrxqa_pipeline.hashing import sha256_file
from ehrxqa_pipeline.sources.images import images_dir
from ehrxqa_pipeline.sources.schema import MIMIC_CXR
from ehrxqa_pipeline.warehouse import replace_partition, transaction
from resources import PipelineConfig, Warehouse

IMAGE_PARTITIONS = dg.StaticPartitionsDefinition([f"p{n}" for n in range(10, 20)])
GOLD_STUDIES_KEY = dg.AssetKey([names.CXR_COHORT, "gold_studies"])
RULES_KEY = dg.AssetKey([names.CXR_COHORT, "image_rules"])
INTEGRITY_KEY = dg.AssetKey([names.CXR_COHORT, "image_integrity"])
SILVER_KEY = dg.AssetKey([names.CXR_COHORT, "silver"])
GOLD_KEY = dg.AssetKey([names.CXR_COHORT, "gold"])
DOWNLOADS_KEY = dg.AssetKey([names.CXR_COHORT, "image_downloads"])
COMMON = dict(group_name=names.CXR_COHORT, automation_condition=ON_CHANGE, pool=DUCKDB_POOL,
              op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb"})


@dg.asset(key=GOLD_STUDIES_KEY, code_version="1", deps=[ingest_key("gold_relations")],
          description="Grain: one row per (patient, study, image) the Chest ImaGenome gold file annotates, "
                      "whatever its labels say: the gold patients and images the cohort rules read. A corrected "
                      "gold label leaves this table as it is, so its cascade stops here and no image is "
                      "selected again (issue 23). Source: ingest.gold_relations.", **COMMON)
def gold_studies(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        selection.build_gold_studies(con)
        return table_result(context, con, f"{names.CXR_COHORT}.gold_studies")


@dg.asset(key=RULES_KEY, code_version="2",
          deps=[ingest_key("cxr_metadata"), ingest_key("silver_bbox"), GOLD_STUDIES_KEY],
          description="Grain: one row per MIMIC-CXR image (all views) with the outcome of every selection "
                      "rule, its StudyOrder and its silver/gold drop reason. Source: ingest.cxr_metadata, "
                      "ingest.silver_bbox, cxr_cohort.gold_studies.", **COMMON)
def image_rules(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        selection.build_image_rules(con)
        return table_result(context, con, f"{names.CXR_COHORT}.image_rules",
                            tables=[f"{names.CXR_COHORT}.box_width_stats"])


@dg.asset(key=DOWNLOADS_KEY, code_version="1", deps=[RULES_KEY, GOLD_STUDIES_KEY],
          description="Grain: one line per MIMIC-CXR-JPG image the build reads (rules 1-3 passed, or a gold "
                      "image: the JPEG integrity candidates), known before any JPEG is read, so a user downloads "
                      "only these. Files: EHRXQA_HOME/release/images/build.csv (dicom_id, subject_id, study_id, "
                      "relpath) and build_urls.txt (PhysioNet URLs for wget -i). Source: cxr_cohort.image_rules, "
                      "cxr_cohort.gold_studies.", **{**COMMON, "kinds": {"duckdb", "csv"}})
def image_downloads(pipeline_config: PipelineConfig, warehouse: Warehouse) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    with warehouse.connect() as con:
        images = downloads.build_images(con)
    version = settings.layout().version(MIMIC_CXR)
    paths = downloads.write_list(images, settings.release_dir / downloads.OUT_DIR, downloads.BUILD_LIST, version)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(combine(*(sha256_file(p) for p in paths))),
        metadata={"dagster/row_count": images.height, "path": dg.MetadataValue.path(str(paths[1])), **written(paths[0]),
                  "per_partition": dg.MetadataValue.json(dict(
                      images.group_by(images["relpath"].str.slice(0, 3)).len().sort("relpath").rows()))})


@dg.asset(key=INTEGRITY_KEY, code_version="1", deps=[RULES_KEY, GOLD_STUDIES_KEY],
          partitions_def=IMAGE_PARTITIONS, check_specs=[contract_check_spec(INTEGRITY_KEY)],
          description="Grain: one row per candidate image (rules 1-3 passed, or a gold image) of one top "
                      "folder, with its JPEG status: ok, missing_jpeg, undecodable_jpeg or size_mismatch. "
                      "Source: cxr_cohort.image_rules, cxr_cohort.gold_studies (the candidates), "
                      "SOURCE_ROOT/mimic-cxr-jpg/2.0.0/files/pNN.", **{**COMMON, "kinds": {"duckdb", "pillow"}})
def image_integrity(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
                    warehouse: Warehouse) -> dg.MaterializeResult:
    settings = pipeline_config.settings()
    part = context.partition_key
    with warehouse.connect() as con:
        images = con.execute(candidates_sql(), [part[1:]]).pl()
    if settings.check_images:
        result = check_images(images_dir(settings.layout()), images, part)
    else:  # metadata-only source: nothing to check, the cohorts skip the JPEG rule
        result = images.head(0).select("dicom_id", "relpath")
        context.log.warning("EHRXQA_CHECK_IMAGES=0: JPEGs not checked")
    with warehouse.connect() as con:
        with transaction(con):  # a metadata-only source writes no rows
            replace_partition(con, f"{names.CXR_COHORT}.image_integrity", INTEGRITY_CONTRACT.duckdb_columns(),
                              part, result)
        counts = result.group_by("status").len().sort("status").rows() if settings.check_images else []
        context.log.info(f"{part}: {images.height} candidate images, {result.height} checked {dict(counts)}")
        rows = (f'(SELECT * EXCLUDE ("partition") FROM {names.CXR_COHORT}.image_integrity '
                f"WHERE \"partition\" = '{part}')")
        return table_result(context, con, rows, metadata={"status_counts": dg.MetadataValue.json(dict(counts)),
                                                          "checked": settings.check_images},
                            check_results=[contract_check_result(con, INTEGRITY_KEY)])


@dg.multi_asset(
    specs=[dg.AssetSpec(SILVER_KEY, deps=[RULES_KEY, INTEGRITY_KEY], code_version="2",
                        description="Grain: one row per selected silver image (one frontal image per study, "
                                    "StudyOrder <= 20, 36 boxes, no width outlier, no gold patient, sound "
                                    "JPEG). Refused images: cxr_cohort.silver_rejected with the first rule "
                                    "they fail; images remaining after each rule: cxr_cohort.funnel (cohort "
                                    "'silver'). Source: cxr_cohort.image_rules, cxr_cohort.image_integrity.",
                        **{k: v for k, v in COMMON.items() if k not in ("pool", "op_tags")}),
           # the gold image of each gold patient is read from cxr_cohort.gold_studies itself
           dg.AssetSpec(GOLD_KEY, deps=[RULES_KEY, INTEGRITY_KEY, GOLD_STUDIES_KEY], code_version="2",
                        description="Grain: one row per gold-patient image (rules 1-3, the checked gold image "
                                    "in place of the StudyOrder-1 pick). Refused: cxr_cohort.gold_rejected; "
                                    "funnel: cxr_cohort.funnel (cohort 'gold'). "
                                    "Source: cxr_cohort.image_rules, cxr_cohort.gold_studies.",
                        **{k: v for k, v in COMMON.items() if k not in ("pool", "op_tags")})],
    pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
    check_specs=[dg.AssetCheckSpec("gold_first_study_rule", asset=GOLD_KEY, blocking=True,
                                   description="Every gold patient has one frontal gold image in its "
                                               "StudyOrder-1 study (checked, not assumed)."),
                 *[dg.AssetCheckSpec("not_empty", asset=k, blocking=True, description="The cohort has images.")
                   for k in (SILVER_KEY, GOLD_KEY)]])
def cohorts(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
    settings = pipeline_config.settings()
    with warehouse.connect() as con:
        out = selection.build_cohorts(con, check_jpegs=settings.check_images)
        results = []
        for key, cohort in ((SILVER_KEY, "silver"), (GOLD_KEY, "gold")):
            funnel = out["funnels"][cohort]
            context.log.info(f"{cohort} cohort: {funnel[-1][1]} images; refused {out[f'{cohort}_reasons']}")
            table = f"{names.CXR_COHORT}.{cohort}"
            steps = f"(SELECT * FROM {names.CXR_COHORT}.funnel WHERE cohort = '{cohort}')"
            results.append(table_result(context, con, table, tables=[f"{table}_rejected", steps], asset_key=key,
                                        metadata={
                "funnel": dg.MetadataValue.md(markdown.table(("rule", "images remaining"), funnel)),
                "funnel_json": dg.MetadataValue.json(funnel),
                "rejected_by_reason": dg.MetadataValue.json(out[f"{cohort}_reasons"]),
                **({"gold_checks": dg.MetadataValue.json(out["gold_checks"])} if cohort == "gold" else {})}))
    yield from results
    for key, cohort in ((SILVER_KEY, "silver"), (GOLD_KEY, "gold")):
        reasons = out[f"{cohort}_reasons"]
        jpeg = sum(reasons.get(r, 0) for r in JPEG_FAILURES)
        yield dg.AssetCheckResult(
            check_name="not_empty", asset_key=key, passed=out["funnels"][cohort][-1][1] > 0,
            description=f"{out['funnels'][cohort][-1][1]} images; {jpeg} refused for their JPEG"
                        + (" -- is mimic-cxr-jpg/2.0.0/files downloaded? For a metadata-only source set "
                           "EHRXQA_CHECK_IMAGES=0." if jpeg else ""))
    failing = out["gold_checks"]["gold_patients_failing_first_study_rule"]
    yield dg.AssetCheckResult(check_name="gold_first_study_rule", asset_key=GOLD_KEY, passed=failing == 0,
                              metadata=out["gold_checks"],
                              description=f"{failing} gold patients fail the first-study rule "
                                          "(see cxr_cohort.gold_rejected)")
