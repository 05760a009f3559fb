"""Cardiothoracic (CTR) and mediastinal-thoracic (MTR) width ratios from the 224-space boxes.

thorax width = max(x1, x2) of the left lung - min(x1, x2) of the right lung (the patient's right lung is
on the image's left); cardiac / upper-mediastinal width = |x2 - x1|. One definition for the VQA programs
and the EHRXQA answer sheet (the published scripts use two slightly different ones, defect 11). An image
missing any of the four boxes, or with a non-positive thorax width, gets null ratios (never an error).
Silver images use the silver detector boxes; gold images the radiologist-corrected ``coord224`` boxes.
"""

from __future__ import annotations

RATIO_BOXES = ("left lung", "right lung", "cardiac silhouette", "upper mediastinum")


def ratios_sql(boxes_sql: str) -> str:
    """``boxes_sql`` yields (image_id, bbox_name, x1, x2); returns SELECT image_id, ctr, mtr."""
    return f"""
    WITH b AS (SELECT image_id, bbox_name, least(x1, x2) AS lo, greatest(x1, x2) AS hi
               FROM ({boxes_sql}) WHERE bbox_name IN {RATIO_BOXES}),
    w AS (SELECT image_id,
                 max(hi) FILTER (WHERE bbox_name = 'left lung') - min(lo) FILTER (WHERE bbox_name = 'right lung')
                     AS thorax,
                 max(hi - lo) FILTER (WHERE bbox_name = 'cardiac silhouette') AS cardiac,
                 max(hi - lo) FILTER (WHERE bbox_name = 'upper mediastinum') AS mediastinal
          FROM b GROUP BY image_id)
    SELECT image_id,
           CASE WHEN thorax > 0 THEN cardiac / thorax END AS ctr,
           CASE WHEN thorax > 0 THEN mediastinal / thorax END AS mtr
    FROM w"""


SILVER_BOXES_SQL = ("SELECT split_part(object_id, '_', 1) AS image_id, bbox_name, x1, x2 "
                    "FROM ingest.silver_bbox")
GOLD_BOXES_SQL = """
    SELECT replace(image_id, '.dcm', '') AS image_id, bbox_name,
           CAST(string_split(trim(coord224, '[] '), ',')[1] AS DOUBLE) AS x1,
           CAST(string_split(trim(coord224, '[] '), ',')[3] AS DOUBLE) AS x2
    FROM ingest.gold_bbox"""
