"""Image selection and outlier removal for MIMIC-CXR-VQA (silver and gold cohorts), in DuckDB SQL.

Every image of the metadata gets one row in ``image_rules`` with the outcome of each rule; the first rule
an image fails is its drop reason. Rules, in funnel order:

1. ``frontal_view``       ViewPosition is AP or PA.
2. ``one_image_per_study`` the study's earliest frontal image (StudyDate+StudyTime), then smallest dicom_id.
3. ``max_20_studies``     StudyOrder <= 20; StudyOrder ranks a patient's selected studies strictly by
                          (study datetime, study_id) -- the published rank ties equal datetimes and counts
                          lateral-only studies (docs/deviations.md).
4. ``has_36_boxes``       exactly the 36 detector boxes in the silver box file; an image absent from the
                          box file fails too (the published script lets it through). Zero-area boxes
                          (width or height 0) count, as published; a box with negative extent was
                          quarantined at ingest (``negative_extent``), so its image has 35 here.
5. ``box_width_within_3sd`` every box width within mean +- 3 sample sd of that box over the images that
                          passed rules 1-4 (not over the whole file); zero widths enter the statistics
                          and are judged like any other width, as published.
6. ``not_gold_patient``   (silver only) patients of the gold set are held out for the test set.

Gold cohort: gold patients' images after rules 1-3, where the gold-annotated image replaces the image
chosen for StudyOrder 1 -- after checking that each gold patient has exactly one gold image, that it is in
the metadata, frontal, and belongs to the patient's StudyOrder-1 study (the published script only asserts
a row count). A patient failing a check loses the StudyOrder-1 row (quarantined with the reason).

The gold patients and images come from ``gold_studies`` (``build_gold_studies``: the distinct patient,
study and image of the Chest ImaGenome gold file), not from the gold labels themselves: a corrected gold
label leaves the cohorts as they are.

Both cohorts finally require a sound JPEG (``cxr_cohort.image_integrity``) unless image checks are off.
"""

from __future__ import annotations

import duckdb

from ehrxqa_pipeline.cxr.integrity import JPEG_FAILURES
from ehrxqa_pipeline.filters import Rule, funnel, reason_sql, reasons_of, write_split

# The rules in funnel order; each drops the images whose rule column (``image_rules``) is false.
SILVER_RULES = (
    Rule("frontal_view", "NOT frontal_view", "the questions are asked of frontal (AP or PA) images"),
    Rule("one_image_per_study", "NOT one_image_per_study", "one image per study: its earliest frontal image"),
    Rule("max_20_studies", "NOT max_20_studies", "at most 20 studies per patient, as published"),
    Rule("has_36_boxes", "NOT has_36_boxes", "every question's object needs its detector box"),
    Rule("box_width_within_3sd", "NOT box_width_within_3sd", "a box far wider or narrower than its peers is a "
                                                               "detection error"),
    Rule("not_gold_patient", "gold_patient", "gold patients are held out for the test set"),
)
GOLD_RULES = (Rule("not_gold_patient", "NOT gold_patient", "the gold cohort is the gold patients' images"),
              *SILVER_RULES[:3])
# Checks of a gold patient's gold image (g: its gold images, m: its image_rules row, f: the automatic pick)
GOLD_IMAGE_CHECKS = (
    Rule("several_gold_images", "g.n_gold_images > 1", "one gold image per patient is what the test set expects"),
    Rule("gold_image_not_in_metadata", "m.dicom_id IS NULL", "the gold image must be a MIMIC-CXR image"),
    Rule("gold_image_not_frontal", "NOT m.frontal_view", "the cohorts hold frontal images only"),
    Rule("gold_image_not_first_study", "f.first_study IS NULL OR m.study_id <> f.first_study",
         "the gold image replaces the StudyOrder-1 pick, so it must belong to that study"),
)
MAX_STUDY_ORDER = 20
N_BOXES = 36
WIDTH_SD = 3.0

STUDY_DATETIME_SQL = """
    make_timestamp(
        (StudyDate // 10000)::BIGINT, ((StudyDate // 100) % 100)::BIGINT, (StudyDate % 100)::BIGINT,
        (floor(StudyTime / 10000))::BIGINT, (floor(StudyTime / 100) % 100)::BIGINT,
        round(StudyTime - 100 * floor(StudyTime / 100), 6))"""


def build_gold_studies(con: duckdb.DuckDBPyConnection, schema: str = "cxr_cohort") -> None:
    """Create ``{schema}.gold_studies``: one row per (patient, study, image) the Chest ImaGenome gold file
    annotates (image_id without its ``.dcm``), whatever its labels say."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"""
    CREATE OR REPLACE TABLE {schema}.gold_studies AS
    SELECT DISTINCT patient_id AS subject_id, study_id, replace(image_id, '.dcm', '') AS image_id
    FROM ingest.gold_relations ORDER BY subject_id, study_id, image_id""")


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
    gold_patients AS (SELECT DISTINCT subject_id FROM {schema}.gold_studies)
    SELECT o.*, coalesce(b.n_boxes, 0) AS n_boxes,
           coalesce(o.study_order <= {MAX_STUDY_ORDER}, FALSE) AS max_20_studies,
           coalesce(b.n_boxes, 0) = {N_BOXES} AS has_36_boxes,
           g.subject_id IS NOT NULL AS gold_patient
    FROM ordered o LEFT JOIN boxes b USING (dicom_id) LEFT JOIN gold_patients g USING (subject_id)
    """)
    # Width statistics over the images that passed rules 1-4, then each image's worst box. Each aggregate reads
    # its widths in order (ORDER BY): DuckDB's parallel aggregation otherwise combines the threads' partial
    # states in the order the threads finish, and the sample sd of a million widths then differs in its last
    # bits from one run to the next (tests/cxr/test_selection_rows.py), and with it this table's content.
    con.execute(f"""
    CREATE OR REPLACE TABLE {schema}.box_width_stats AS
    SELECT b.bbox_name, avg(b.width ORDER BY b.width) AS mean_width,
           stddev_samp(b.width ORDER BY b.width) AS sd_width, count(*) AS n
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
           {reason_sql(SILVER_RULES)} AS silver_reason, {reason_sql(GOLD_RULES)} AS gold_reason
    FROM (SELECT * FROM {schema}.image_rules) r LEFT JOIN outliers o USING (dicom_id)
    ORDER BY r.subject_id, r.study_datetime, r.study_id, r.dicom_id""")


COHORT_COLUMNS = ("subject_id, study_id, dicom_id AS image_id, view_position, study_datetime, study_order, "
                  "n_rows, n_columns")
# write_split's columns and order of a cohort and of its refused images
_COHORT_TABLES = dict(kept_columns=COHORT_COLUMNS, kept_order="subject_id, study_order",
                      rejected_columns="dicom_id AS image_id, subject_id, study_id, view_position, study_order, "
                                       "reason", rejected_order="subject_id, study_datetime, dicom_id")


def _jpeg_reason(check_jpegs: bool, schema: str, alias: str) -> tuple[str, str]:
    """(JOIN onto the integrity table for rows of ``alias``, the JPEG drop-reason expression)."""
    if not check_jpegs:
        return "", "NULL"
    return (f" LEFT JOIN {schema}.image_integrity i ON i.dicom_id = {alias}.dicom_id",
            "CASE WHEN coalesce(i.status, 'missing_jpeg') <> 'ok' THEN coalesce(i.status, 'missing_jpeg') END")


def build_cohorts(con: duckdb.DuckDBPyConnection, check_jpegs: bool, schema: str = "cxr_cohort") -> dict:
    """Create {schema}.silver / silver_rejected / gold / gold_rejected and {schema}.funnel (images remaining
    after each rule, per cohort, in rule order); return the funnels, the refusals by reason and gold checks."""
    join, jpeg = _jpeg_reason(check_jpegs, schema, "r")
    con.execute(f"""
    CREATE OR REPLACE TEMP TABLE _silver AS
    SELECT r.*, coalesce(r.silver_reason, {jpeg}) AS reason FROM {schema}.image_rules r{join}""")
    kept, silver_reasons = write_split(con, "_silver", kept=f"{schema}.silver", rejected=f"{schema}.silver_rejected",
                                       **_COHORT_TABLES)
    silver_funnel = funnel(kept + sum(silver_reasons.values()), silver_reasons,
                           [*reasons_of(SILVER_RULES), *([("sound_jpeg", JPEG_FAILURES)] if check_jpegs else [])],
                           start="all_images")

    # Gold first-study rule, checked per gold patient.
    con.execute(f"""
    CREATE OR REPLACE TEMP TABLE _gold_check AS
    WITH gold_images AS (
        SELECT subject_id, min(image_id) AS gold_image, count(DISTINCT image_id) AS n_gold_images
        FROM {schema}.gold_studies GROUP BY subject_id),
    first_pick AS (
        SELECT subject_id, study_id AS first_study, dicom_id AS auto_image FROM {schema}.image_rules
        WHERE gold_reason IS NULL AND study_order = 1)
    SELECT g.subject_id, g.gold_image, f.auto_image, f.first_study,
           {reason_sql(GOLD_IMAGE_CHECKS)} AS problem
    FROM gold_images g LEFT JOIN {schema}.image_rules m ON m.dicom_id = g.gold_image
    LEFT JOIN first_pick f ON f.subject_id = g.subject_id""")
    # Each gold patient's checked gold image takes the place of the automatic StudyOrder-1 pick.
    join, jpeg = _jpeg_reason(check_jpegs, schema, "m")
    con.execute(f"""
    CREATE OR REPLACE TEMP TABLE _gold2 AS
    WITH marked AS (
        SELECT r.*, c.gold_image, c.problem,
               r.gold_reason IS NULL AND r.study_order = 1 AS auto_first,
               c.problem IS NULL AND r.dicom_id = c.gold_image AS is_gold_image
        FROM {schema}.image_rules r LEFT JOIN _gold_check c USING (subject_id))
    SELECT m.subject_id, m.study_id, m.dicom_id, m.view_position, m.study_datetime,
           CASE WHEN m.is_gold_image THEN 1 ELSE m.study_order END AS study_order, m.n_rows, m.n_columns,
           CASE WHEN m.is_gold_image THEN {jpeg}
                WHEN m.auto_first AND m.problem IS NOT NULL THEN m.problem
                WHEN m.auto_first AND m.gold_image IS NOT NULL THEN 'replaced_by_gold_image'
                ELSE coalesce(m.gold_reason, {jpeg}) END AS reason
    FROM marked m{join}""")
    # the images of other patients are not part of the gold population: neither kept nor refused
    _, gold_reasons = write_split(con, "(SELECT * FROM _gold2 WHERE reason IS DISTINCT FROM 'not_gold_patient')",
                                  kept=f"{schema}.gold", rejected=f"{schema}.gold_rejected", **_COHORT_TABLES)
    checks = dict(con.execute("""
        SELECT 'gold_patients', count(*) FROM _gold_check UNION ALL
        SELECT 'gold_images_replacing_auto_pick', count(*) FROM _gold_check
            WHERE problem IS NULL AND gold_image <> auto_image UNION ALL
        SELECT 'gold_patients_failing_first_study_rule', count(*) FROM _gold_check WHERE problem IS NOT NULL
        """).fetchall())
    funnels = {"silver": silver_funnel, "gold": _gold_funnel(con, schema)}
    con.execute(f"CREATE OR REPLACE TABLE {schema}.funnel (cohort VARCHAR, step INTEGER, rule VARCHAR, "
                "images BIGINT)")
    con.executemany(f"INSERT INTO {schema}.funnel VALUES (?, ?, ?, ?)",
                    [(cohort, i, rule, n) for cohort, steps in funnels.items() for i, (rule, n) in enumerate(steps)])
    for t in ("_silver", "_gold_check", "_gold2"):
        con.execute(f"DROP TABLE {t}")
    return {"funnels": funnels, "gold_checks": checks, "silver_reasons": silver_reasons,
            "gold_reasons": gold_reasons}


def _gold_funnel(con, schema: str) -> list[tuple[str, int]]:
    """Rules 1-3 on the gold patients' images, then the cohort after the first-study rule (and JPEGs)."""
    met = dict(con.execute(f"SELECT gold_reason, count(*) FROM {schema}.image_rules GROUP BY 1").fetchall())
    out = funnel(sum(met.values()), met, reasons_of(GOLD_RULES), start="all_images")
    out.append(("first_study_rule", con.execute(
        f"SELECT count(*) FROM _gold2 WHERE reason IS NULL OR reason IN {JPEG_FAILURES}").fetchone()[0]))
    out.append(("sound_jpeg", con.execute("SELECT count(*) FROM _gold2 WHERE reason IS NULL").fetchone()[0]))
    return out
