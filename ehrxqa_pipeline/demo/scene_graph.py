"""Synthetic ``silver_dataset/scene_graph.zip``: the silver tables as per-image scene-graph JSONs.

Grain: one member ``scene_graph/{dicom_id}_SceneGraph.json`` per image of either silver table, in the
layout docs/scene_graph.md documents: top-level image fields, ``objects`` (one entry per row of
``silver_bbox``), ``attributes`` (one entry per image x report object of ``silver_relations``, one phrase per
sentence, one ``"category|yes|label"`` string per row), ``relationships`` (empty). Converting the zip back
(``ehrxqa_pipeline.sources.scene_graph``) gives the same rows, planted defects included: missing or absent
boxes, width outliers, ``unknown`` and ``nlp`` rows, negations, conflicts, repeated rows.

Determinism: members in dicom-id order, fixed ZipInfo date, attributes and compression level, so the same
tables give the same bytes. The JSON text is assembled with polars string expressions (no per-row Python),
a chunk of images at a time, so a full-scale source is written in bounded memory.
"""

from __future__ import annotations

import ast
import json
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.demo.ontology import cui
from ehrxqa_pipeline.sources.scene_graph import MEMBER_SUFFIX, ZIP_RELEASE_PATH
from ehrxqa_pipeline.sources.schema import TABLES

MEMBER_DIR = "scene_graph"  # the folder `unzip scene_graph.zip` creates (docs/scene_graph.md)
DATE_TIME = (1980, 1, 1, 0, 0, 0)
COMPRESSLEVEL = 1  # fast; the real zip's level is unknown and irrelevant to readers
CHUNK_IMAGES = 5_000
_CUES = ("comparison_cues", "temporal_cues", "severity_cues", "texture_cues")
_INT_BOX = ("x1", "y1", "x2", "y2", "width", "height")  # 224 space: whole numbers, written as JSON integers
_BOX_IMAGE = pl.col("object_id").str.splitn("_", 2).struct.field("field_0").alias("dicom_id")
_REL_IMAGE = pl.col("image_id").str.strip_suffix(".dcm").alias("dicom_id")
_SLICE = 1_000_000  # table rows whose dicom ids are materialised at once


def _q(value: str) -> str:
    return json.dumps(value)


def _quoted(col: str | pl.Expr) -> pl.Expr:
    """A String column as JSON string literals (escaped only where a value needs it)."""
    e = pl.col(col) if isinstance(col, str) else col
    plain = ~e.str.contains(r'["\\\x00-\x1f]')
    return pl.when(plain).then(pl.concat_str(pl.lit('"'), e, pl.lit('"'))).otherwise(
        e.map_elements(_q, return_dtype=pl.String))


def _vocab(series: pl.Series, fn) -> pl.Expr:
    """``fn`` of each distinct value of ``series`` (a small vocabulary), as a replace expression."""
    values = series.unique().drop_nulls().to_list()
    return (pl.col(series.name).replace_strict({v: fn(v) for v in values}, default="null", return_dtype=pl.String)
            .fill_null("null"))


def _array(col: str) -> pl.Expr:
    """A list of JSON texts as one JSON array text (a list aggregation joined afterwards: much faster in
    polars than joining strings inside the aggregation)."""
    return pl.concat_str(pl.lit("["), pl.col(col).list.join(", "), pl.lit("]")).alias(col)


def _number(col: str, whole: bool) -> pl.Expr:
    e = pl.col(col)
    text = e.cast(pl.String)
    if whole:
        text = pl.when(e == e.round()).then(e.cast(pl.Int64).cast(pl.String)).otherwise(text)
    return text.fill_null("null")


def _objects(bbox: pl.DataFrame) -> pl.DataFrame:
    """dicom_id -> JSON array of the image's ``objects`` entries, in the table's row order."""
    cols = TABLES["silver_bbox"].header
    parts = []
    for col in cols:
        if col == "synsets":
            value = _vocab(bbox["synsets"], lambda s: json.dumps(ast.literal_eval(s)))
        elif col in ("bbox_name", "name"):
            value = _vocab(bbox[col], _q)
        elif col == "object_id":
            value = _quoted(col)
        else:
            value = _number(col, col in _INT_BOX)
        parts += [pl.lit(f'{_q(col)}: '), value, pl.lit(", ")]
    entry = pl.concat_str([pl.lit("{"), *parts[:-1], pl.lit("}")])
    return (bbox.select(_BOX_IMAGE, entry=entry)
            .group_by("dicom_id", maintain_order=True).agg(objects="entry")
            .with_columns(pl.col("objects").list.join(", ")))


def _attributes(rel: pl.DataFrame) -> pl.DataFrame:
    """dicom_id -> JSON array of the image's ``attributes`` entries (report objects in order of first
    mention; phrases in sentence order; strings in the table's row order)."""
    if not rel.filter((pl.col("context") == "yes") != (pl.col("relation") == 1)).is_empty():
        raise ValueError("silver_relations: context must be 'yes' exactly where relation is 1 (the JSON holds "
                         "one yes/no token per attribute)")
    rel = rel.with_row_index("r").with_columns(
        dicom_id=pl.col("image_id").str.strip_suffix(".dcm"),
        sent=pl.col("row_id").str.split("|").list.last(),
        text=pl.concat_str("categoryID", "context", "label_name", separator="|"))
    strings, ids = _vocab(rel["text"], _q), _vocab(rel["label_name"], lambda a: _q(cui(a)))
    phrases = (rel.with_columns(s=strings, i=ids)
               .group_by("dicom_id", "bbox", "sent", maintain_order=True)
               .agg(pl.col("r").first(), pl.col("study_id").first(), att="s", ids="i")
               .with_columns(_array("att"), _array("ids"))
               .sort("dicom_id", "bbox", pl.col("sent").cast(pl.Int64)))
    phrases = phrases.with_columns(
        pid=pl.concat_str(pl.lit('"'), pl.col("study_id").cast(pl.String), pl.lit("|"), "sent", pl.lit('"')),
        text=pl.concat_str(pl.lit('"Synthetic report sentence '), "sent", pl.lit('."')))

    entries = (phrases.group_by("dicom_id", "bbox", maintain_order=True)
               .agg(pl.col("r").min(), "att", "ids", "text", "pid", n=pl.len())
               .with_columns(_array("att"), _array("ids"), _array("text"), _array("pid"))
               .sort("dicom_id", "r"))
    name = _vocab(entries["bbox"], lambda b: _q(b[0].upper() + b[1:]))
    syn = _vocab(entries["bbox"], lambda b: json.dumps([cui(b)]))
    empty = pl.concat_str(pl.lit("["), pl.lit("[]").repeat_by("n").list.join(", "), pl.lit("]"))
    sections = pl.concat_str(pl.lit("["), pl.lit('"finalreport"').repeat_by("n").list.join(", "), pl.lit("]"))
    bbox = _quoted("bbox")
    entry = pl.concat_str([
        pl.lit("{"), bbox, pl.lit(": true, \"bbox_name\": "), bbox, pl.lit(', "synsets": '), syn,
        pl.lit(', "name": '), name, pl.lit(', "attributes": '), "att", pl.lit(', "attributes_ids": '), "ids",
        pl.lit(', "phrases": '), "text", pl.lit(', "phrase_IDs": '), "pid", pl.lit(', "sections": '), sections,
        *[p for cue in _CUES for p in (pl.lit(f", {_q(cue)}: "), empty)],
        pl.lit(', "object_id": '), _quoted(pl.concat_str("dicom_id", pl.lit("_"), "bbox")), pl.lit("}")])
    return (entries.select("dicom_id", entry=entry)
            .group_by("dicom_id", maintain_order=True).agg(attributes="entry")
            .with_columns(pl.col("attributes").list.join(", ")))


def _documents(images: pl.DataFrame, bbox: pl.DataFrame, rel: pl.DataFrame) -> pl.DataFrame:
    """dicom_id, json: one scene-graph document per image of ``images``."""
    docs = (images.join(_objects(bbox), on="dicom_id", how="left")
            .join(_attributes(rel), on="dicom_id", how="left"))
    when = pl.concat_str(pl.col("StudyDate").cast(pl.String).str.strptime(pl.Date, "%Y%m%d").cast(pl.String),
                         pl.col("StudyTime").cast(pl.Int64).cast(pl.String).str.zfill(6)
                         .str.replace(r"(\d\d)(\d\d)(\d\d)$", "$1:$2:$3"), separator=" ")
    doc = pl.concat_str([
        pl.lit('{"image_id": '), _quoted("dicom_id"), pl.lit(', "viewpoint": '), _quoted("ViewPosition"),
        pl.lit(', "patient_id": '), pl.col("subject_id").cast(pl.String),
        pl.lit(', "study_id": '), pl.col("study_id").cast(pl.String),
        pl.lit(', "gender": '), _quoted("gender").fill_null("null"),
        pl.lit(', "age_decile": null, "reason_for_exam": null, "StudyOrder": null, "StudyDateTime": '),
        _quoted(when).fill_null("null"),
        pl.lit(', "objects": ['), pl.col("objects").fill_null(""),
        pl.lit('], "attributes": ['), pl.col("attributes").fill_null(""), pl.lit('], "relationships": []}')])
    return docs.select("dicom_id", json=doc)


def _row_chunks(frame: pl.DataFrame, image: pl.Expr, key: pl.DataFrame) -> pl.Series:
    """The chunk number of each row of ``frame`` (``key``: dicom_id -> chunk), a slice at a time so that no
    full-length column of dicom ids is ever held."""
    parts = [frame.slice(s, _SLICE).select(image).join(key, on="dicom_id", how="left", maintain_order="left")
             ["chunk"] for s in range(0, frame.height, _SLICE)]
    return pl.concat(parts) if parts else pl.Series("chunk", [], pl.Int32)


def write_scene_graph_zip(root: Path, bbox: pl.DataFrame, relations: pl.DataFrame, images: pl.DataFrame) -> Path:
    """Write ``root/chest-imagenome/1.0.0/silver_dataset/scene_graph.zip`` from the silver tables.

    ``bbox`` / ``relations``: the frames written as ``silver_bbox`` / ``silver_relations``; ``images``:
    dicom_id, subject_id, study_id, ViewPosition, StudyDate, StudyTime, gender for (at least) every image of
    the two tables. Returns the zip's path."""
    wanted = pl.concat([frame.slice(s, _SLICE).select(image).unique()
                        for frame, image in ((bbox, _BOX_IMAGE), (relations, _REL_IMAGE))
                        for s in range(0, frame.height, _SLICE)]).unique().sort("dicom_id")
    images = (wanted.with_row_index("k").with_columns(chunk=(pl.col("k") // CHUNK_IMAGES).cast(pl.Int32))
              .join(images, on="dicom_id", how="left", maintain_order="left"))
    if images["study_id"].null_count():
        raise ValueError("images lacks some dicom ids of the silver tables")
    # Each table row's chunk number, found once; a chunk's rows are then an integer filter.
    key = images.select("dicom_id", "chunk")
    box_chunk, rel_chunk = _row_chunks(bbox, _BOX_IMAGE, key), _row_chunks(relations, _REL_IMAGE, key)

    def documents(chunk: pl.DataFrame) -> pl.DataFrame:
        c = chunk["chunk"][0]
        return _documents(chunk, bbox.filter(box_chunk == c), relations.filter(rel_chunk == c))

    path = root / ZIP_RELEASE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = images.partition_by("chunk", maintain_order=True)
    # The next chunk's documents are built (polars, GIL released) while this one is deflated (zlib, likewise).
    with zipfile.ZipFile(path, "w") as zf, ThreadPoolExecutor(1) as pool:
        pending = pool.submit(documents, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            docs = pending.result()
            pending = pool.submit(documents, chunks[k + 1]) if k + 1 < len(chunks) else None
            for dicom, text in docs.iter_rows():
                info = zipfile.ZipInfo(f"{MEMBER_DIR}/{dicom}{MEMBER_SUFFIX}", date_time=DATE_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3
                info.external_attr = 0o644 << 16
                zf.writestr(info, text, compresslevel=COMPRESSLEVEL)
            del docs
    return path
