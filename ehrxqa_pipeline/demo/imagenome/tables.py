"""Chest ImaGenome files in their release layouts, built from integer-coded arrays.

Repeated strings (box names, labels, categories, image ids, row ids) are built once and gathered, so a
column of millions of rows shares one small string buffer; only ``object_id`` is unique per row.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.boxes import SIZE
from ehrxqa_pipeline.demo.imagenome.findings import ATT, CATEGORIES, OBJ
from ehrxqa_pipeline.demo.ontology import BOX_OBJECTS, cui
from ehrxqa_pipeline.sources.schema import TABLES

_BOX = pl.Series(BOX_OBJECTS, dtype=pl.String)
_SYN = pl.Series([f"['{cui(b)}']" for b in BOX_OBJECTS], dtype=pl.String)
_NAME = pl.Series([b[0].upper() + b[1:] for b in BOX_OBJECTS], dtype=pl.String)


def _coords(b: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> dict[str, np.ndarray]:
    """224-space and original-pixel coordinates (original = 224 space scaled to Columns x Rows)."""
    sx, sy = cols / SIZE, rows / SIZE
    x1, y1, x2, y2 = (b[:, i].astype(np.float64) for i in range(4))
    ox1, oy1, ox2, oy2 = (np.round(v * s, 2) for v, s in ((x1, sx), (y1, sy), (x2, sx), (y2, sy)))
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "width": x2 - x1, "height": y2 - y1,
            "original_x1": ox1, "original_y1": oy1, "original_x2": ox2, "original_y2": oy2,
            "original_width": np.round(ox2 - ox1, 2), "original_height": np.round(oy2 - oy1, 2)}


def truth_boxes_frame(dicom: pl.Series, boxes: np.ndarray) -> pl.DataFrame:
    """One row per frontal image x 36 boxes: dicom_id, bbox_name, x1, y1, x2, y2 (224 space)."""
    n = len(dicom)
    img = np.repeat(np.arange(n), len(BOX_OBJECTS))
    flat = boxes.reshape(-1, 4).astype(np.float64)
    return pl.DataFrame({"dicom_id": dicom.gather(img), "bbox_name": _BOX.gather(np.tile(np.arange(len(BOX_OBJECTS)), n)),
                         "x1": flat[:, 0], "y1": flat[:, 1], "x2": flat[:, 2], "y2": flat[:, 3]})


def silver_bbox_frame(dicom: pl.Series, boxes: np.ndarray, keep: np.ndarray, rows: np.ndarray,
                      cols: np.ndarray) -> pl.DataFrame:
    """bbox_objects_tabular.txt: the kept (image, box) cells of ``boxes`` in image order."""
    img, box = np.nonzero(keep)
    c = _coords(boxes[img, box], rows[img], cols[img])
    names = _BOX.gather(box)
    df = pl.DataFrame({"dicom_id": dicom.gather(img), "bbox_name": names, "synsets": _SYN.gather(box),
                       "name": _NAME.gather(box), **c})
    df = df.with_columns(object_id=pl.concat_str("dicom_id", pl.lit("_"), "bbox_name"))
    return df.select(TABLES["silver_bbox"].header)


def gold_bbox_frame(rng: np.random.Generator, dicom: pl.Series, boxes: np.ndarray, rows: np.ndarray,
                    cols: np.ndarray, fixed: list[int], never: list[int], p_other: float) -> pl.DataFrame:
    """gold_bbox_coordinate_annotations_1000images.csv: about 26 boxes per image, radiologist-corrected by
    a pixel or two (only vertically for ``fixed`` boxes, whose widths carry CTR/MTR)."""
    n, nb = boxes.shape[:2]
    keep = rng.random((n, nb)) < p_other
    keep[:, fixed] = True
    keep[:, never] = False
    img, box = np.nonzero(keep)
    b = boxes[img, box].copy()
    delta = rng.integers(-2, 3, b.shape)
    fixed_rows = np.isin(box, fixed)
    delta[fixed_rows, 0] = 0
    delta[fixed_rows, 2] = 0
    b = b + delta
    b[:, 0] = np.clip(b[:, 0], 0, SIZE - 2)
    b[:, 2] = np.clip(np.maximum(b[:, 2], b[:, 0] + 2), 0, SIZE)
    b[:, 1] = np.clip(b[:, 1], 0, SIZE - 2)
    b[:, 3] = np.clip(np.maximum(b[:, 3], b[:, 1] + 2), 0, SIZE)
    c = _coords(b, rows[img], cols[img])
    image_id = dicom.gather(img) + ".dcm"
    names = _BOX.gather(box)
    annotator = np.where(rng.random(len(img)) < 0.5, "annotator1", "annotator2")
    ints = [pl.col(k).cast(pl.Int64).cast(pl.String) for k in ("x1", "y1", "x2", "y2")]
    oints = [pl.col(k).round(0).cast(pl.Int64).cast(pl.String)
             for k in ("original_x1", "original_y1", "original_x2", "original_y2")]
    df = pl.DataFrame({"image_id": image_id, "bbox_name": names, "annotator": annotator, **c})
    df = df.with_columns(
        annot_id=pl.concat_str("image_id", pl.lit("|"), "bbox_name"),
        coord224=pl.concat_str([pl.lit("["), pl.concat_str(ints, separator=", "), pl.lit("]")]),
        coord_original=pl.concat_str([pl.lit("["), pl.concat_str(oints, separator=", "), pl.lit("]")]),
    )
    return df.select(TABLES["gold_bbox"].header)


def relations_frame(rows: pl.DataFrame, images: pl.DataFrame, gold: bool) -> pl.DataFrame:
    """Study-level relation rows copied to the given images (columns img, sidx, dicom_id, study_id,
    subject_id) in the silver or gold attribute-file layout.

    ``row_id`` is ``<study_id>|<sentence>`` in the silver file: the scene graphs' ``phrase_IDs``, which the
    post-processing copies (docs/scene_graph.md); the gold file keeps ``<dicom_id>|<sentence>``. Readers
    use only its last field. ``context`` comes from ``rows`` (``yes`` exactly where ``rel`` is 1)."""
    df = images.select("img", "sidx").join(rows, on="sidx").sort("img", "sent", "obj", "att", "rel")
    img = df["img"].to_numpy()
    dicom = images.sort("img")["dicom_id"]
    image_id = dicom + ".dcm"
    # row_id "<prefix>|<sentence>": built once per (image, sentence) and gathered.
    prefix = dicom if gold else images.sort("img")["study_id"].cast(pl.String)
    n_sent = int(df["sent"].max() or 1)
    pos = np.repeat(np.arange(len(dicom)), n_sent)
    sent_txt = pl.Series(np.tile(np.arange(1, n_sent + 1), len(dicom))).cast(pl.String)
    row_ids = prefix.gather(pos) + "|" + sent_txt
    key = img * n_sent + df["sent"].to_numpy() - 1
    out = pl.DataFrame({
        "study_id": images.sort("img")["study_id"].gather(img),
        "image_id": image_id.gather(img), "row_id": row_ids.gather(key),
        "sent_loc": df["sent"].cast(pl.Float64),
        "bbox": pl.Series(OBJ, dtype=pl.String).gather(df["obj"].cast(pl.Int64)),
        "relation": df["rel"].cast(pl.Int64),
        "label_name": pl.Series(ATT, dtype=pl.String).gather(df["att"].cast(pl.Int64)),
        "categoryID": pl.Series(CATEGORIES, dtype=pl.String).gather(df["cat"].cast(pl.Int64)),
        "context": df["context"],
    })
    if not gold:
        return out.select(TABLES["silver_relations"].header)
    out = out.with_columns(
        patient_id=images.sort("img")["subject_id"].gather(img),
        annot_id=pl.concat_str([pl.col("study_id").cast(pl.String), "bbox", pl.col("relation").cast(pl.String),
                                "label_name"], separator="|"))
    return out.select(TABLES["gold_relations"].header)
