"""Image splits, one asset per side: silver train/valid (95:5, patient-disjoint, stratified by abnormality)
and gold test. Each reads only its own cohort and labels, so a corrected gold label re-splits the gold side
only (and stops there when the test images are the same)."""

import dagster as dg

from assets.automation import DUCKDB_POOL, DUCKDB_TAGS, ON_CHANGE, WITH_ITS_ASSET
from assets.metadata import table_result
from assets.cxr_cohort import GOLD_KEY, SILVER_KEY
from assets.cxr_labels import LABEL_KEYS, images_key
from assets.ingest import ingest_key
from ehrxqa_pipeline import names
from ehrxqa_pipeline.cxr.splits import SIDES, build_splits, patients_in_several_splits
from resources import PipelineConfig, Warehouse

SPLIT_KEYS = {side: dg.AssetKey([names.SPLITS, side]) for side in SIDES}
COHORT_KEYS = {"silver": SILVER_KEY, "gold": GOLD_KEY}
BOXES = {"silver": [ingest_key("silver_bbox")], "gold": [ingest_key("silver_bbox"), ingest_key("gold_bbox")]}
GRAIN = {"silver": "one row per labelled silver image with its split: train or valid (patient-disjoint 95:5, "
                   "stratified by the patient's share of abnormal studies)",
         "gold": "one row per labelled gold first-study image: the test split (CTR/MTR from the gold boxes, "
                 "silver where a gold box is missing)"}


def _split_asset(side: str) -> dg.AssetsDefinition:
    key = SPLIT_KEYS[side]

    @dg.asset(key=key, group_name=names.SPLITS, code_version="3", automation_condition=ON_CHANGE,
              deps=[COHORT_KEYS[side], LABEL_KEYS[side], images_key(LABEL_KEYS[side]), ingest_key("patients"),
                    *BOXES[side]],
              pool=DUCKDB_POOL, op_tags=DUCKDB_TAGS, owners=["team:ehrxqa"], kinds={"duckdb"},
              check_specs=[dg.AssetCheckSpec("patient_disjoint", asset=key, blocking=True,
                                             description="No patient has images in two splits of this side.")],
              description=f"Grain: {GRAIN[side]}, view, sex, image path, CTR and MTR. Cohort images without "
                          f"labels: splits.{side}_rejected; null ratios with their reasons (a missing or "
                          f"zero-width box): splits.{side}_ratio_gaps. Source: cxr_cohort.{side}, "
                          f"cxr_labels.{side}, ingest.patients, box files.")
    def _asset(context: dg.AssetExecutionContext, pipeline_config: PipelineConfig, warehouse: Warehouse):
        with warehouse.connect() as con:
            out = build_splits(con, side, pipeline_config.settings().seed)
            leaks = patients_in_several_splits(con, sides=(side,))
            context.log.info(f"{side} splits: {out['per_split']}; {out['rejected_no_labels']} cohort images "
                             "without labels")
            materialized = table_result(context, con, f"{names.SPLITS}.{side}",
                                        tables=[f"{names.SPLITS}.{side}_rejected", f"{names.SPLITS}.{side}_ratio_gaps"],
                                        metadata={"per_split": dg.MetadataValue.json(out["per_split"]),
                                                  "rejected_no_labels": out["rejected_no_labels"],
                                                  "null_ratios_by_reason": dg.MetadataValue.json(
                                                      out["null_ratios_by_reason"])})
        yield materialized
        yield dg.AssetCheckResult(check_name="patient_disjoint", passed=leaks == 0,
                                  description=f"{leaks} patients appear in more than one split")

    return _asset


SPLIT_ASSETS = [_split_asset(side) for side in SIDES]


@dg.asset_check(asset=SPLIT_KEYS["gold"], name="no_patient_on_both_sides", blocking=True,
                additional_deps=[SPLIT_KEYS["silver"]], automation_condition=WITH_ITS_ASSET,
                description="No test patient has a train or valid image (the silver cohort leaves the gold "
                            "patients out; checked, not assumed).")
def no_patient_on_both_sides(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        leaks = patients_in_several_splits(con)
    return dg.AssetCheckResult(passed=leaks == 0, description=f"{leaks} patients are in the test split and in "
                                                              "train or valid")
