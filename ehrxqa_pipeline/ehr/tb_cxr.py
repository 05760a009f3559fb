"""TB_CXR (the image reference table), its admission link, and TB_CXR_PLUS (the answer sheet).

Study -> admission link (reference 5.4, defect 18), on source times: a study takes the hadm_id of the
subject's transfer whose [intime, outtime] contains the study time (both ends inclusive; transfers without
an outtime -- discharge events -- cannot contain anything). 0 matches -> null. Several matches (overlapping
rows, or a study exactly on a boundary between two transfers) -> the matching transfer that carries an
admission, latest intime first, then the largest transfer_id; null when none carries one (the published
script raises, except for one hard-coded subject). A linked admission that is not in the database (age,
stay length, time frame) leaves hadm_id null. ``<build>._links`` keeps every study's match count.

TB_CXR rows: the image set of the sampled patients, shifted like every other time of the patient (never
rotated, defect 16); dropped: ``no_labels`` (an image without answer-sheet labels could not be answered,
defect 9), ``after_current_time`` / ``before_start``.

TB_CXR_PLUS (dense as published: one row per TB_CXR image x possible (object, attribute) pair, relation
0/1): silver database -> the silver labels (``cxr_labels.silver``); gold database -> the gold labels for
the gold first-study images and, for the later studies of gold patients, silver labels refined from the
RAW silver relations (``cxr_labels.gold_later``, ``cxr.labels.refine_labels``: never re-processing processed
rows, defect 5).
ct_ratio / mt_ratio: the database's split table (``splits.silver`` / ``splits.gold``, gold boxes for gold
images) where the image is there, otherwise
the silver boxes through ``cxr.ratios.ratios_sql``; studyorder = the cohort's StudyOrder.
"""

from __future__ import annotations

import duckdb

from ehrxqa_pipeline.cxr.ratios import ratios_sql, silver_boxes_of
from ehrxqa_pipeline.ehr.tables import Ctx
from ehrxqa_pipeline.ehr.timeshift import shift
from ehrxqa_pipeline.filters import Rule, reason_sql

LABELS = {"silver": "cxr_labels.silver", "gold": "cxr_labels.gold"}  # + _images, _pairs
LATER = "cxr_labels.gold_later"  # the gold patients' later studies, refined from the RAW silver relations


def link_sql(studies: str, transfers: str) -> str:
    """``studies``: subject_id, study_id, study_datetime; ``transfers``: subject_id, hadm_id, transfer_id,
    intime, outtime. Returns study_id, n_matches, hadm_id (the link, may be null), transfer_id."""
    return f"""
    WITH s AS ({studies}),
    m AS (
        SELECT s.study_id, t.hadm_id, t.transfer_id,
               count(*) OVER (PARTITION BY s.study_id) AS n,
               row_number() OVER (PARTITION BY s.study_id
                                  ORDER BY t.hadm_id IS NULL, t.intime DESC, t.transfer_id DESC) AS r
        FROM s JOIN ({transfers}) t ON t.subject_id = s.subject_id
             AND t.intime <= s.study_datetime AND s.study_datetime <= t.outtime)
    SELECT s.study_id, CAST(coalesce(m.n, 0) AS BIGINT) AS n_matches, m.hadm_id, m.transfer_id
    FROM s LEFT JOIN m ON m.study_id = s.study_id AND m.r = 1"""


def stage_links(con: duckdb.DuckDBPyConnection, build: str) -> dict:
    """Create ``<build>._links`` for the sampled patients' studies; return counts by number of matches."""
    studies = (f"SELECT subject_id, study_id, study_datetime FROM {build}._images "
               f"WHERE subject_id IN (SELECT subject_id FROM {build}._sampled)")
    transfers = "SELECT subject_id, hadm_id, transfer_id, intime, outtime FROM ingest.transfers"
    con.execute(f"CREATE OR REPLACE TABLE {build}._links AS {link_sql(studies, transfers)} ORDER BY study_id")
    row = con.execute(f"""
        SELECT count(*) FILTER (n_matches = 0), count(*) FILTER (n_matches = 1),
               count(*) FILTER (n_matches = 1 AND hadm_id IS NULL), count(*) FILTER (n_matches > 1),
               count(*) FILTER (n_matches > 1 AND hadm_id IS NULL)
        FROM {build}._links""").fetchone()
    return {"studies_matching_0_transfers": row[0], "studies_matching_1_transfer": row[1],
            "studies_matching_1_transfer_without_admission": row[2], "studies_matching_several_transfers": row[3],
            "studies_matching_several_transfers_none_with_admission": row[4]}


def _mine(build: str) -> str:
    return f"SELECT image_id FROM {build}._images WHERE subject_id IN (SELECT subject_id FROM {build}._sampled)"


def _later(build: str) -> str:
    return f"SELECT image_id FROM {build}._images WHERE studyorder > 1 AND image_id IN ({_mine(build)})"


def _label_sources(which: str, build: str) -> list[tuple[str, str, str]]:
    """(label set, labels table, condition on image_id) of the sampled patients' images: the silver database
    -> the silver labels; the gold database -> the gold labels for the first studies, ``cxr_labels.gold_later``
    (refined from the RAW silver relations) for the later ones."""
    if which == "silver":
        return [("silver", LABELS[which], f"image_id IN ({_mine(build)})")]
    first = f"SELECT image_id FROM {build}._images WHERE studyorder = 1 AND image_id IN ({_mine(build)})"
    return [("gold", LABELS[which], f"image_id IN ({first})"), ("silver_refined", LATER, f"image_id IN ({_later(build)})")]


def stage_label_images(con: duckdb.DuckDBPyConnection, which: str, build: str) -> dict:
    """Create ``<build>._label_images`` (image_id, label_set): the sampled patients' images that have labels,
    from the label sets' image lists alone (``cxr_labels.<set>_images``), so the database reads which images
    are labelled, never the labels (a label edit leaves the database as it is: issue 23)."""
    con.execute(f"CREATE OR REPLACE TABLE {build}._label_images AS " + " UNION ALL ".join(
        f"SELECT image_id, '{name}' AS label_set FROM {table}_images WHERE {cond}"
        for name, table, cond in _label_sources(which, build)) + " ORDER BY image_id")
    return dict(con.execute(f"SELECT 'labelled_images_' || label_set, count(*) FROM {build}._label_images "
                            f"GROUP BY 1 ORDER BY 1").fetchall())


def stage_answer_labels(con: duckdb.DuckDBPyConnection, which: str, build: str, work: str) -> dict:
    """Create ``<work>._label_pos`` (affirmed image x pair) and ``<work>._pairs`` (object, attribute, category)
    for the images of the database whose workspace is ``build``: what the answer sheet reads of the labels."""
    sources = _label_sources(which, build)
    counts: dict = {}
    if which == "gold":
        base, later = LABELS[which], _later(build)
        counts = dict(zip(("later_studies_images", "later_studies_affirmed_rows_out"), con.execute(f"""
            SELECT (SELECT count(*) FROM {LATER}_images WHERE image_id IN ({later})),
                   (SELECT count(*) FROM {LATER} WHERE image_id IN ({later}))""").fetchone()))
        same = con.execute(f"""SELECT count(*) FROM (
            (SELECT object, attribute, category FROM {base}_pairs EXCEPT SELECT * FROM {LATER}_pairs)
            UNION ALL
            (SELECT * FROM {LATER}_pairs EXCEPT SELECT object, attribute, category FROM {base}_pairs))
            """).fetchone()[0]
        if same:
            raise ValueError(f"{base}_pairs and the ontology's pair pool differ ({same} pairs)")
    con.execute(f"CREATE OR REPLACE TABLE {work}._label_pos AS " + " UNION ALL ".join(
        f"SELECT image_id, object, attribute FROM {table} WHERE {cond}" for _, table, cond in sources)
        + " ORDER BY image_id, object, attribute")
    con.execute(f"CREATE OR REPLACE TABLE {work}._pairs AS SELECT object, attribute, category "
                f"FROM {LABELS[which]}_pairs ORDER BY object, attribute")
    counts["pairs"] = con.execute(f"SELECT count(*) FROM {work}._pairs").fetchone()[0]
    return counts


NO_LABELS = Rule("no_labels", "li.image_id IS NULL", "an image without answer-sheet labels cannot be answered "
                                                    "(defect 9)")


def tb_cxr_sql(c: Ctx) -> str:
    t = shift("i.study_datetime")
    return f"""
    SELECT i.subject_id, k.hadm_id, i.study_id, i.image_id, i.viewposition, {t} AS studydatetime,
           {reason_sql([NO_LABELS, *c.key_time(t)])} AS reason
    FROM {c.build}._images i JOIN {c.build}._offsets o USING (subject_id)
    LEFT JOIN {c.build}._links l ON l.study_id = i.study_id
    LEFT JOIN {c.schema}.admissions k ON k.hadm_id = l.hadm_id
    LEFT JOIN {c.build}._label_images li ON li.image_id = i.image_id"""


def tb_cxr_plus_sql(c: Ctx, which: str, work: str) -> str:
    """``work``: the schema of ``stage_answer_labels``'s tables."""
    return f"""
    WITH silver_ratios AS ({ratios_sql(silver_boxes_of(f"SELECT image_id FROM {c.schema}.tb_cxr"))})
    SELECT t.subject_id, t.hadm_id, t.study_id, t.image_id, t.viewposition, t.studydatetime, i.studyorder,
           p.object, CAST(pos.image_id IS NOT NULL AS INTEGER) AS relation, p.attribute, p.category,
           CASE WHEN s.image_id IS NOT NULL THEN s.ctr ELSE r.ctr END AS ct_ratio,
           CASE WHEN s.image_id IS NOT NULL THEN s.mtr ELSE r.mtr END AS mt_ratio,
           NULL AS reason
    FROM {c.schema}.tb_cxr t JOIN {c.build}._images i ON i.image_id = t.image_id
    CROSS JOIN {work}._pairs p
    LEFT JOIN {work}._label_pos pos
           ON pos.image_id = t.image_id AND pos.object = p.object AND pos.attribute = p.attribute
    LEFT JOIN splits.{which} s ON s.image_id = t.image_id
    LEFT JOIN silver_ratios r ON r.image_id = t.image_id"""
