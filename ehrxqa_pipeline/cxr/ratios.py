"""Cardiothoracic (CTR) and mediastinal-thoracic (MTR) width ratios from the 224-space boxes.

thorax width = max(x1, x2) of the left lung - min(x1, x2) of the right lung (the patient's right lung is
on the image's left); cardiac / upper-mediastinal width = |x2 - x1|. One definition for the VQA programs
and the EHRXQA answer sheet (the published scripts use two slightly different ones, defect 11).

A ratio is null, never an error, when a box it needs cannot carry it; ``ctr_reason`` / ``mtr_reason`` say
why (null when the ratio is there): the first box, in the order right lung, left lung, then the ratio's own
box, that cannot carry it is named, ``missing_box:<name>`` or ``zero_width_box:<name>`` (the detector output
has zero-area boxes; a lung of width 0 gives no thorax edge and a heart or mediastinum of width 0 no width to
compare -- the published program divides by zero or answers "no"); then ``nonpositive_thorax``. Only widths matter: a box of height 0
and positive width still gives its width. Silver images use the silver detector boxes; gold images the
radiologist-corrected ``coord224`` boxes.
"""

from __future__ import annotations

RATIO_BOXES = ("left lung", "right lung", "cardiac silhouette", "upper mediastinum")
NUMERATOR = {"ctr": "cardiac silhouette", "mtr": "upper mediastinum"}


def _box_reason(width: str, name: str) -> str:
    return (f"WHEN {width} IS NULL THEN 'missing_box:{name}' WHEN {width} = 0 THEN 'zero_width_box:{name}'")


def ratios_sql(boxes_sql: str) -> str:
    """``boxes_sql`` yields (image_id, bbox_name, x1, x2); returns SELECT image_id, ctr, mtr, ctr_reason,
    mtr_reason (one row per image with at least one of the four boxes)."""
    def width(name: str) -> str:
        return f"max(hi - lo) FILTER (WHERE bbox_name = '{name}')"

    reasons = {r: f"""CASE {_box_reason('w_right', 'right lung')} {_box_reason('w_left', 'left lung')}
                           {_box_reason(f'w_{r}', name)} WHEN thorax <= 0 THEN 'nonpositive_thorax' END"""
               for r, name in NUMERATOR.items()}
    return f"""
    WITH b AS (SELECT image_id, bbox_name, least(x1, x2) AS lo, greatest(x1, x2) AS hi
               FROM ({boxes_sql}) WHERE bbox_name IN {RATIO_BOXES}),
    w AS (SELECT image_id,
                 max(hi) FILTER (WHERE bbox_name = 'left lung') - min(lo) FILTER (WHERE bbox_name = 'right lung')
                     AS thorax,
                 {width('right lung')} AS w_right, {width('left lung')} AS w_left,
                 {width('cardiac silhouette')} AS w_ctr, {width('upper mediastinum')} AS w_mtr
          FROM b GROUP BY image_id),
    r AS (SELECT *, {reasons['ctr']} AS ctr_reason, {reasons['mtr']} AS mtr_reason FROM w)
    SELECT image_id,
           CASE WHEN ctr_reason IS NULL THEN w_ctr / thorax END AS ctr,
           CASE WHEN mtr_reason IS NULL THEN w_mtr / thorax END AS mtr,
           ctr_reason, mtr_reason
    FROM r"""


SILVER_BOXES_SQL = ("SELECT split_part(object_id, '_', 1) AS image_id, bbox_name, x1, x2 "
                    "FROM ingest.silver_bbox")
GOLD_BOXES_SQL = """
    SELECT replace(image_id, '.dcm', '') AS image_id, bbox_name,
           CAST(string_split(trim(coord224, '[] '), ',')[1] AS DOUBLE) AS x1,
           CAST(string_split(trim(coord224, '[] '), ',')[3] AS DOUBLE) AS x2
    FROM ingest.gold_bbox"""


def silver_boxes_of(images_sql: str) -> str:
    """``SILVER_BOXES_SQL`` of the images ``images_sql`` selects (one column, image_id) only: the ratios of a few
    images without aggregating the boxes of every silver image (8.6 million rows at full scale)."""
    return f"{SILVER_BOXES_SQL} WHERE split_part(object_id, '_', 1) IN ({images_sql})"


def test_image_ratio(name: str, gold: str = "g", silver: str = "s") -> str:
    """SQL of a test (gold) image's ratio ``name`` (``ctr`` or ``mtr``) from the rows ``gold`` and ``silver`` of
    ``ratios_sql`` over the gold and the silver boxes: the radiologist-corrected gold boxes', the silver
    detector's where the gold boxes give none."""
    return f"coalesce({gold}.{name}, {silver}.{name})"
