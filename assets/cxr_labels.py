"""Ontology and refined labels (silver from silver relations, gold from RAW gold relations)."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE, WITH_ITS_ASSET
from assets.metadata import check_results, table_result
from assets.cxr_cohort import GOLD_KEY, SILVER_KEY
from assets.ingest import ingest_key
from assets.sources import SOURCE_KEYS, SOURCE_FILE_FIELD, SOURCE_VERSION_FIELD, version_as_read
from ehrxqa_pipeline import names
from ehrxqa_pipeline.cxr import labels, labels_checks
from ehrxqa_pipeline.cxr.ontology import build_ontology, ontology_tables, read_ontology
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.hashing import FileChangedError
from ehrxqa_pipeline.sources.semantics import read_semantics, semantics_paths
from ehrxqa_pipeline.warehouse import replace_tables
from resources import PipelineConfig, Warehouse

ONTOLOGY_KEY = dg.AssetKey([names.CXR_LABELS, "ontology"])
LABEL_KEYS = {"silver": dg.AssetKey([names.CXR_LABELS, "silver"]), "gold": dg.AssetKey([names.CXR_LABELS, "gold"])}
GOLD_LATER_KEY = dg.AssetKey([names.CXR_LABELS, "gold_later"])
PAPER_PAIRS = 563  # possible (object, attribute) pairs the paper reports for 36 objects x 68 attributes
COMMON = dict(group_name=names.CXR_LABELS, automation_condition=ON_CHANGE, owners=["team:ehrxqa"],
              kinds={"duckdb"})


def images_key(labels_key: dg.AssetKey) -> dg.AssetKey:
    """The asset of a label set's image list (``cxr_labels.<set>_images``): which images have labels, written by
    the label step beside the labels, with a data version of its own: a label edit that keeps the list leaves
    what reads only the list (the databases' TB_CXR) as it is (issue 23)."""
    return dg.AssetKey([*labels_key.path[:-1], f"{labels_key.path[-1]}_images"])


@dg.asset(key=ONTOLOGY_KEY, code_version="2", deps=[SOURCE_KEYS[names.SEMANTICS]], pool=DUCKDB_POOL,
          op_tags=DUCKDB_TAGS,
          description="Grain: one row per possible (object, attribute) pair after the documented ontology "
                      "edits, the transitive closure and the removal of 2 objects and 7 attributes "
                      "(cxr_labels.pairs; cxr_labels.pairs_all keeps the removed ones, flagged). The rest of the "
                      "ontology, which the label and database steps read: cxr_labels.ontology_objects, "
                      "ontology_attributes (file order, removed flag, category) and ontology_object_closure, "
                      "ontology_attribute_closure (each label with itself and every ancestor). Source: Chest "
                      "ImaGenome semantics files (the only step that reads them).", **COMMON)
def ontology(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig,
             warehouse: Warehouse) -> dg.MaterializeResult:
    # the semantics files' version as read, hashed before the read and checked after it (release/manifest
    # records it); a missing file is left to read_semantics, whose error names it and the fix
    layout = pipeline_config.settings().layout()
    try:
        paths = list(semantics_paths(layout))
        read = version_as_read(pipeline_config.settings().cache_dir, paths) if all(p.exists() for p in paths) \
            else None
        onto = build_ontology(read_semantics(layout))
        if read is not None:
            read[1]()
    except SourceError as e:
        raise dg.Failure(description=str(e)) from None
    except FileChangedError as e:
        raise dg.Failure(description=f"semantics: {e}; nothing was built") from None
    provenance = {} if read is None else {SOURCE_VERSION_FIELD: read[0], SOURCE_FILE_FIELD: dg.MetadataValue.json(
        [layout.canonical(p) for p in paths])}
    with warehouse.connect() as con:
        tables = {"pairs": onto.pairs, "pairs_all": onto.all_pairs, **ontology_tables(onto)}
        replace_tables(con, names.CXR_LABELS, tables)
        return table_result(context, con, f"{names.CXR_LABELS}.pairs",
                            tables=[f"{names.CXR_LABELS}.{t}" for t in tables if t != "pairs"],
                            metadata={"objects": len(onto.objects), "attributes": len(onto.attributes),
                                      "possible_pairs": onto.n_pairs, "paper_possible_pairs": PAPER_PAIRS,
                                      "summary": dg.MetadataValue.json(onto.summary()), **provenance})


def _label_asset(name: str, cohort_key: dg.AssetKey, relations: str, images_sql: str, images: str, source: str
                 ) -> dg.AssetsDefinition:
    key, out = dg.AssetKey([names.CXR_LABELS, name]), f"{names.CXR_LABELS}.{name}"
    image_list = images_key(key)
    checks = [dg.AssetCheckSpec(check, asset=key, blocking=True, description=text) for check, text in (
        ("closure", "An affirmed pair implies every ancestor pair (objects and attributes) affirmed."),
        ("in_pool", "No affirmed pair outside the possible-pair pool."),
        ("one_row_per_image_pair", "The dense view has exactly one row per image x possible pair."))]
    deps = [cohort_key, ONTOLOGY_KEY, ingest_key(relations)]
    specs = [dg.AssetSpec(key, deps=deps, code_version="1", **COMMON,
                          description=f"Grain: one row per {images} x affirmed (object, attribute); every other "
                                      f"image x possible pair is negative (dense view: cxr_labels.{name} x pairs, "
                                      f"relation 0/1). Last sentence wins, affirmed labels propagate to ancestors, "
                                      f"impossible pairs and removed labels dropped. Source: {source}; refused rows "
                                      f"in cxr_labels.{name}_rejected; the pair pool in cxr_labels.{name}_pairs."),
             dg.AssetSpec(image_list, deps=deps, code_version="1", **COMMON,
                          description=f"Grain: one row per {images} with at least one relation row: which images "
                                      f"have labels (cxr_labels.{name}_images), not the labels; written with "
                                      f"cxr_labels/{name}. Source: {source}.")]

    @dg.multi_asset(name=f"{names.CXR_LABELS}__{name}", specs=specs, pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS,
                    check_specs=checks)
    def _asset(context: dg.AssetExecutionContext, warehouse: Warehouse):
        with warehouse.connect() as con:
            onto = read_ontology(con, names.CXR_LABELS)
            sql = labels.relations_sql(f"ingest.{relations}", images_sql=images_sql)
            context.log.info(f"{name}: refining ingest.{relations} over {onto.n_pairs} possible pairs")
            result = labels.refine_labels(con, sql, onto, out, rejected_table=f"{out}_rejected")
            context.log.info(f"{name}: {result.counts.get('affirmed_rows_out')} affirmed rows for "
                             f"{result.counts.get('images')} images; dropped {result.dropped_rows}; checking")
            outcomes = {"closure": labels_checks.check_closure(con, out, onto),
                        "in_pool": labels_checks.check_in_pool(con, out, onto),
                        "one_row_per_image_pair": labels_checks.check_dense_unique(con, out)}
            materialized = table_result(context, con, out, tables=[f"{out}_pairs", f"{out}_rejected"], asset_key=key,
                                        metadata={**result.metadata(), "possible_pairs": onto.n_pairs})
            listed = table_result(context, con, f"{out}_images", asset_key=image_list)
        yield materialized
        yield listed
        yield from check_results(outcomes)

    return _asset


silver_labels = _label_asset("silver", SILVER_KEY, "silver_relations", "SELECT image_id FROM cxr_cohort.silver",
                             "silver image", "silver relations of the cxr_cohort.silver images")
gold_labels = _label_asset("gold", GOLD_KEY, "gold_relations", "SELECT image_id FROM cxr_cohort.gold", "gold image",
                           "RAW gold relations (never re-processed output) of the cxr_cohort.gold images")
# The gold file labels each gold patient's first study only; the gold EHRXQA database also asks about their later
# studies, labelled from the RAW silver relations. Their own asset: a silver edit elsewhere leaves it as it is, so
# the gold database is not rebuilt for it (issue 23).
gold_later_labels = _label_asset(
    "gold_later", GOLD_KEY, "silver_relations", labels.GOLD_LATER_STUDIES, "later-study (StudyOrder > 1) gold-cohort "
    "image", "RAW silver relations (never re-processed output) of the gold patients' later studies in "
    "cxr_cohort.gold, which the gold file does not label")


@dg.asset_check(asset=LABEL_KEYS["gold"], name="same_pool_as_silver", blocking=True,
                additional_deps=[LABEL_KEYS["silver"]], automation_condition=WITH_ITS_ASSET,
                description="Silver and gold use identical object/attribute pools.")
def same_pool(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        passed, details = labels_checks.check_same_pool(con, f"{names.CXR_LABELS}.silver", f"{names.CXR_LABELS}.gold")
    return dg.AssetCheckResult(passed=bool(passed), metadata={"details": dg.MetadataValue.json(details)})
