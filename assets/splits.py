"""Silver train/valid (95:5, patient-disjoint, stratified by abnormality) and gold test images."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE
from assets.metadata import table_result
from assets.cxr_cohort import GOLD_KEY, SILVER_KEY
from assets.cxr_labels import LABEL_KEYS
from assets.ingest import ingest_key
from ehrxqa_pipeline import names
from ehrxqa_pipeline.cxr.splits import build_splits, patients_in_several_splits
from resources import PipelineConfig, Warehouse

SPLITS_KEY = dg.AssetKey([names.SPLITS, "images"])


@dg.asset(key=SPLITS_KEY, group_name=names.SPLITS, code_version="2", automation_condition=ON_CHANGE,
          deps=[SILVER_KEY, GOLD_KEY, LABEL_KEYS["silver"], LABEL_KEYS["gold"], ingest_key("patients"),
                ingest_key("silver_bbox"), ingest_key("gold_bbox")],
          pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb"},
          check_specs=[dg.AssetCheckSpec("patient_disjoint", asset=SPLITS_KEY, blocking=True,
                                         description="No patient has images in two splits.")],
          description="Grain: one row per labelled image with its split (train/valid from silver, "
                      "patient-disjoint 95:5 stratified by the patient's share of abnormal studies; test = "
                      "the gold first-study images), view, sex, image path, CTR and MTR. Cohort images "
                      "without labels: splits.images_rejected; null ratios with their reasons (a missing or "
                      "zero-width box): splits.ratio_gaps. Source: cxr_cohort, cxr_labels, "
                      "ingest.patients, box files.")
def split_images(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
    with warehouse.connect() as con:
        out = build_splits(con, pipeline_config.settings().seed)
        leaks = patients_in_several_splits(con)
        context.log.info(f"splits: {out['per_split']}; {out['rejected_no_labels']} cohort images without labels")
        materialized = table_result(context, con, f"{names.SPLITS}.images",
                                    tables=[f"{names.SPLITS}.images_rejected", f"{names.SPLITS}.ratio_gaps"],
                                    metadata={"per_split": dg.MetadataValue.json(out["per_split"]),
                                              "rejected_no_labels": out["rejected_no_labels"],
                                              "null_ratios_by_reason": dg.MetadataValue.json(
                                                  out["null_ratios_by_reason"])})
    yield materialized
    yield dg.AssetCheckResult(check_name="patient_disjoint", passed=leaks == 0,
                              description=f"{leaks} patients appear in more than one split")
