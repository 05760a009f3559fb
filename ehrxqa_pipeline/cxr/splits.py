"""Patient-disjoint silver train/valid split, stratified by how abnormal each patient's studies are.

The published split draws abnormal and normal studies' patients separately, so a patient with both kinds
lands in train and valid (defect 10). Here each PATIENT is assigned once: patients are grouped into strata
by the share of their studies with any affirmed finding (0, (0, 1/3], (1/3, 2/3], (2/3, 1), 1), shuffled
within a stratum by the step's own generator, and the valid quota -- ``round(N * valid_fraction)``, at least
one patient when there are two or more -- is shared among the strata in proportion to their sizes (largest
remainder), so even a small source gets a valid split. Gold images are the test split.

Each side has its own tables (``splits.silver``: train and valid; ``splits.gold``: test), built from its own
cohort and labels, so a corrected gold label never re-splits the silver images (issue 23).

CTR / MTR come from ``cxr.ratios`` (test images: gold boxes, silver where gold gives none); every null ratio
of ``splits.<side>`` has a row in ``splits.<side>_ratio_gaps`` with the reason of each box set tried.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.rng import generator

VALID_FRACTION = 0.05


def assign_patient_splits(studies: pl.DataFrame, seed: int, valid_fraction: float = VALID_FRACTION
                          ) -> pl.DataFrame:
    """``studies``: subject_id, study_id, abnormal (bool). Returns subject_id, stratum, split."""
    patients = (studies.group_by("subject_id")
                .agg(pl.col("abnormal").mean().alias("share"))
                .with_columns(pl.when(pl.col("share") == 0).then(0)
                              .when(pl.col("share") == 1).then(4)
                              .otherwise((pl.col("share") * 3).ceil().cast(pl.Int64).clip(1, 3))
                              .alias("stratum"))
                .sort("subject_id"))
    rng = generator(seed, "splits.silver")
    sizes = np.array([patients.filter(pl.col("stratum") == k).height for k in range(5)])
    quota = _quotas(sizes, valid_fraction)
    parts = []
    for stratum in range(5):  # five strata, not a loop over rows
        group = patients.filter(pl.col("stratum") == stratum)
        order = rng.permutation(group.height)
        split = np.where(np.argsort(order) < quota[stratum], "valid", "train")
        parts.append(group.select("subject_id", "stratum").with_columns(pl.Series("split", split)))
    return pl.concat(parts).sort("subject_id")


def _quotas(sizes: np.ndarray, fraction: float) -> np.ndarray:
    """Valid patients per stratum: the total quota shared by largest remainder (ties: lower stratum)."""
    total = sizes.sum()
    target = max(1, int(round(total * fraction))) if total >= 2 else 0
    exact = sizes * (target / total) if total else sizes * 0.0
    quota = np.floor(exact).astype(int)
    for k in np.argsort(-(exact - quota), kind="stable")[: target - quota.sum()]:
        quota[k] += 1
    return np.minimum(quota, sizes)


SIDES = ("silver", "gold")


def build_splits(con, side: str, seed: int, valid_fraction: float = VALID_FRACTION) -> dict:
    """Create the split tables of one side (``SIDES``): ``splits.<side>`` (one row per labelled image with
    split, view, sex, path, CTR/MTR, abnormal: train/valid from the silver cohort and labels, test from the
    gold first-study images and the gold labels), ``splits.<side>_rejected`` (cohort images without any
    label row: reason no_labels) and ``splits.<side>_ratio_gaps`` (one row per image x null ratio:
    silver_reason, and gold_reason on the gold side; ``no_boxes`` where the box set has none of the ratio
    boxes). Each side reads only its own cohort and labels, so an edit on one side leaves the other's tables
    as they are."""
    from ehrxqa_pipeline.cxr.ratios import (GOLD_BOXES_SQL, SILVER_BOXES_SQL, ratios_sql, silver_boxes_of,
                                            test_image_ratio)
    from ehrxqa_pipeline.sources.schema import image_relpath_sql

    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}")
    gold = side == "gold"
    con.execute("CREATE SCHEMA IF NOT EXISTS splits")
    # the gold side's images are the gold first studies': the silver ratios of those only
    first_studies = "SELECT image_id FROM cxr_cohort.gold WHERE study_order = 1"
    silver_boxes = silver_boxes_of(first_studies) if gold else SILVER_BOXES_SQL
    con.execute(f"CREATE OR REPLACE TEMP TABLE _silver_ratios AS {ratios_sql(silver_boxes)}")
    if gold:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _gold_ratios AS {ratios_sql(GOLD_BOXES_SQL)}")
        labelled = """SELECT c.*, 'test' AS split FROM cxr_cohort.gold c
                      JOIN cxr_labels.gold_images USING (image_id) WHERE c.study_order = 1"""
        ratio = test_image_ratio
        gold_join = "LEFT JOIN _gold_ratios g USING (image_id)"
        order = "l.subject_id, l.study_order"
    else:
        studies = con.execute("""
            SELECT c.subject_id, c.study_id,
                   EXISTS (SELECT 1 FROM cxr_labels.silver l WHERE l.image_id = c.image_id) AS abnormal
            FROM cxr_cohort.silver c JOIN cxr_labels.silver_images USING (image_id)""").pl()
        con.register("_assign", assign_patient_splits(studies, seed, valid_fraction))
        labelled = """SELECT c.*, a.split FROM cxr_cohort.silver c
                      JOIN cxr_labels.silver_images USING (image_id) JOIN _assign a USING (subject_id)"""
        ratio, gold_join = (lambda name: f"s.{name}"), ""
        order = "CASE l.split WHEN 'train' THEN 0 ELSE 1 END, l.subject_id, l.study_order"
    con.execute(f"""
    CREATE OR REPLACE TABLE splits.{side} AS
    WITH labelled AS ({labelled})
    SELECT l.image_id, l.subject_id, l.study_id, l.split, l.view_position, p.gender,
           {image_relpath_sql('l.subject_id', 'l.study_id', 'l.image_id')} AS image_path,
           {ratio('ctr')} AS ctr, {ratio('mtr')} AS mtr,
           EXISTS (SELECT 1 FROM cxr_labels.{side} x WHERE x.image_id = l.image_id) AS abnormal
    FROM labelled l LEFT JOIN ingest.patients p USING (subject_id)
    LEFT JOIN _silver_ratios s USING (image_id) {gold_join}
    ORDER BY {order}""")
    if not gold:
        con.unregister("_assign")
    gold_reason = "coalesce(r.gold_reason, 'no_boxes')" if gold else "NULL::VARCHAR"
    con.execute(f"""
    CREATE OR REPLACE TABLE splits.{side}_ratio_gaps AS
    SELECT i.image_id, i.split, r.ratio, coalesce(r.silver_reason, 'no_boxes') AS silver_reason,
           {gold_reason} AS gold_reason
    FROM splits.{side} i
    LEFT JOIN _silver_ratios s USING (image_id) {gold_join},
    LATERAL (SELECT 'ctr' AS ratio, s.ctr_reason AS silver_reason, {'g.ctr_reason' if gold else 'NULL'} AS gold_reason,
                    i.ctr AS value
             UNION ALL SELECT 'mtr', s.mtr_reason, {'g.mtr_reason' if gold else 'NULL'}, i.mtr) r
    WHERE r.value IS NULL
    ORDER BY i.image_id, r.ratio""")
    con.execute("DROP TABLE _silver_ratios")
    if gold:
        con.execute("DROP TABLE _gold_ratios")
    first_study = " AND study_order = 1" if gold else ""
    con.execute(f"""
    CREATE OR REPLACE TABLE splits.{side}_rejected AS
    SELECT image_id, subject_id, study_id, '{side}' AS cohort, 'no_labels' AS reason FROM cxr_cohort.{side}
    WHERE image_id NOT IN (SELECT image_id FROM cxr_labels.{side}_images){first_study}
    ORDER BY subject_id, image_id""")
    rows = con.execute(f"""SELECT split, count(*), count(DISTINCT subject_id), avg(abnormal::INT)
                           FROM splits.{side} GROUP BY split ORDER BY split""").fetchall()
    rejected = con.execute(f"SELECT count(*) FROM splits.{side}_rejected").fetchone()[0]
    gaps: dict = {}
    for ratio_name, reason, n in con.execute(f"SELECT ratio, silver_reason, count(*) FROM splits.{side}_ratio_gaps "
                                             "GROUP BY ALL ORDER BY ALL").fetchall():
        gaps.setdefault(ratio_name, {})[reason] = n
    return {"per_split": {r[0]: {"images": r[1], "patients": r[2], "abnormal_share": round(r[3], 4)}
                          for r in rows}, "rejected_no_labels": rejected, "null_ratios_by_reason": gaps}


def split_images_sql(sides=SIDES) -> str:
    """Every labelled image of ``sides`` (one SELECT over ``splits.<side>``), for SQL that joins or filters;
    a reader that needs the rows in release order reads the sides one after the other."""
    return " UNION ALL ".join(f"SELECT * FROM splits.{side}" for side in sides)


def patients_in_several_splits(con, sides=SIDES) -> int:
    """Patients with images in more than one split among ``sides``' tables."""
    return con.execute(f"SELECT count(*) FROM (SELECT subject_id FROM ({split_images_sql(sides)}) GROUP BY "
                       "subject_id HAVING count(DISTINCT split) > 1)").fetchone()[0]
