"""Image selection and outlier removal for MIMIC-CXR-VQA (silver and gold cohorts), in DuckDB SQL.

Every image of the metadata gets one row in ``image_rules`` with the outcome of each rule; the first rule
an image fails is its drop reason. Rules, in funnel order:

1. ``frontal_view``       ViewPosition is AP or PA.
2. ``one_image_per_study`` the study's earliest frontal image (StudyDate+StudyTime), then smallest dicom_id.
3. ``max_20_studies``     StudyOrder <= 20; StudyOrder ranks a patient's selected studies strictly by
                          (study datetime, study_id) -- the published rank ties equal datetimes and counts
                          lateral-only studies (docs/deviations.md).
4. ``has_36_boxes``       exactly the 36 detector boxes in the silver box file; an image absent from the
                          box file fails too (the published script lets it through).
5. ``box_width_within_3sd`` every box width within mean +- 3 sample sd of that box over the images that
                          passed rules 1-4 (not over the whole file).
6. ``not_gold_patient``   (silver only) patients of the gold set are held out for the test set.

Gold cohort: gold patients' images after rules 1-3, where the gold-annotated image replaces the image
chosen for StudyOrder 1 -- after checking that it exists, is frontal and belongs to StudyOrder 1.
"""

from __future__ import annotations

import duckdb

SILVER_RULES = ("frontal_view", "one_image_per_study", "max_20_studies", "has_36_boxes",
                "box_width_within_3sd", "not_gold_patient")
GOLD_RULES = ("frontal_view", "one_image_per_study", "max_20_studies")
MAX_STUDY_ORDER = 20
N_BOXES = 36
WIDTH_SD = 3.0

STUDY_DATETIME_SQL = """
    make_timestamp(
        (StudyDate // 10000)::BIGINT, ((StudyDate // 100) % 100)::BIGINT, (StudyDate % 100)::BIGINT,
        (floor(StudyTime / 10000))::BIGINT, (floor(StudyTime / 100) % 100)::BIGINT,
        round(StudyTime - 100 * floor(StudyTime / 100), 6))"""


def build_image_rules(con: duckdb.DuckDBPyConnection, schema: str = "cxr_cohort") -> None:
    """Create ``{schema}.image_rules``: one row per metadata image with every rule's outcome."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"""
    CREATE OR REPLACE TABLE {schema}.image_rules AS
    WITH images AS (
        SELECT dicom_id, subject_id, study_id, ViewPosition AS view_position, "Rows" AS n_rows,
               "Columns" AS n_columns, {STUDY_DATETIME_SQL} AS study_datetime,
               coalesce(ViewPosition IN ('AP', 'PA'), FALSE) AS frontal_view
        FROM ingest.cxr_metadata),
    picked AS (
        SELECT *, frontal_view AND row_number() OVER (
                   PARTITION BY study_id, frontal_view ORDER BY study_datetime, dicom_id) = 1
               AS one_image_per_study
        FROM images),
    ordered AS (
        SELECT *, CASE WHEN one_image_per_study THEN row_number() OVER (
                   PARTITION BY subject_id, one_image_per_study ORDER BY study_datetime, study_id) END
               AS study_order
        FROM picked),
    boxes AS (
        SELECT split_part(object_id, '_', 1) AS dicom_id, count(DISTINCT bbox_name) AS n_boxes
        FROM ingest.silver_bbox GROUP BY 1),
    gold_patients AS (SELECT DISTINCT patient_id AS subject_id FROM ingest.gold_relations)
    SELECT o.*, coalesce(b.n_boxes, 0) AS n_boxes,
           coalesce(o.study_order <= {MAX_STUDY_ORDER}, FALSE) AS max_20_studies,
           coalesce(b.n_boxes, 0) = {N_BOXES} AS has_36_boxes,
           g.subject_id IS NOT NULL AS gold_patient
    FROM ordered o LEFT JOIN boxes b USING (dicom_id) LEFT JOIN gold_patients g USING (subject_id)
    """)
    # Width statistics over the images that passed rules 1-4, then each image's worst box.
    con.execute(f"""
    CREATE OR REPLACE TABLE {schema}.box_width_stats AS
    SELECT b.bbox_name, avg(b.width) AS mean_width, stddev_samp(b.width) AS sd_width, count(*) AS n
    FROM ingest.silver_bbox b JOIN {schema}.image_rules r ON split_part(b.object_id, '_', 1) = r.dicom_id
    WHERE r.frontal_view AND r.one_image_per_study AND r.max_20_studies AND r.has_36_boxes
    GROUP BY b.bbox_name ORDER BY b.bbox_name""")
    con.execute(f"""
    CREATE OR REPLACE TABLE {schema}.image_rules AS
    WITH outliers AS (
        SELECT split_part(b.object_id, '_', 1) AS dicom_id,
               bool_or(abs(b.width - s.mean_width) > {WIDTH_SD} * s.sd_width) AS has_outlier
        FROM ingest.silver_bbox b JOIN {schema}.box_width_stats s USING (bbox_name)
        GROUP BY 1)
    SELECT r.*, NOT coalesce(o.has_outlier, FALSE) AS box_width_within_3sd,
           NOT r.gold_patient AS not_gold_patient,
           CASE {' '.join(f"WHEN NOT {rule} THEN '{rule}'" for rule in SILVER_RULES)} END AS silver_reason,
           CASE WHEN NOT r.gold_patient THEN 'not_gold_patient'
                {' '.join(f"WHEN NOT {rule} THEN '{rule}'" for rule in GOLD_RULES)} END AS gold_reason
    FROM (SELECT * FROM {schema}.image_rules) r LEFT JOIN outliers o USING (dicom_id)
    ORDER BY r.subject_id, r.study_datetime, r.study_id, r.dicom_id""")


def funnel(con: duckdb.DuckDBPyConnection, cohort: str, schema: str = "cxr_cohort") -> list[tuple[str, int]]:
    """[(rule, images remaining after it)], starting with ("all_images", n)."""
    rules = SILVER_RULES if cohort == "silver" else ("gold_patient", *GOLD_RULES)
    reason = f"{cohort}_reason"
    rows = dict(con.execute(f"SELECT {reason}, count(*) FROM {schema}.image_rules GROUP BY 1").fetchall())
    remaining = sum(rows.values())
    out = [("all_images", remaining)]
    for rule in rules:
        remaining -= rows.get("not_gold_patient" if rule == "gold_patient" else rule, 0)
        out.append((rule, remaining))
    return out
