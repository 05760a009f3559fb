"""The reference model's working copy of the warehouse, and the EHRXQA images it must also answer about.

Training and inference take minutes (hours at full scale on a GPU); holding the warehouse's single writer
lock that long would stall every other step. ``snapshot`` copies what the model reads into an in-memory
DuckDB under the same table names, so ``vqa.train`` / ``vqa.infer`` run on it and the warehouse is held
for seconds:

- ``splits.images``: the split tables of the sides asked for (``splits.silver``: train and valid,
  ``splits.gold``: test), plus ``extra`` images with split ``'ehrxqa'``;
- ``cxr_labels.pairs``, the labels asked for (``cxr_labels.silver`` to train), and the ``ingest.silver_bbox``
  rows of those images only.

Training snapshots the silver side and its labels only, inference the images only (no labels): a gold label
edit retrains and re-predicts nothing (issue 23).

``database_images`` lists the images of an exported EHRXQA database (TB_CXR; with gender from PATIENTS and
the MIMIC-CXR-JPG path), because the gold database also holds the later studies of gold patients, which no
split lists but whose FUNC_VQA questions the reference model must answer.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import polars as pl

from ehrxqa_pipeline.sources.schema import image_relpath_sql

SIDES = ("silver", "gold")
EXTRA_SPLIT = "ehrxqa"
IMAGE_COLUMNS = {"image_id": pl.String, "subject_id": pl.Int64, "study_id": pl.Int64, "view_position": pl.String,
                 "gender": pl.String}


def database_images(database: str | Path) -> pl.DataFrame:
    """image_id, subject_id, study_id, view_position, gender of every TB_CXR image of an exported database."""
    path = Path(database)
    if not path.is_file():
        raise FileNotFoundError(f"EHRXQA database not found: {path}; materialize ehr_db first")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT CAST(t.image_id AS TEXT), CAST(t.subject_id AS INTEGER), CAST(t.study_id AS INTEGER), "
            "UPPER(MIN(t.viewposition)), UPPER(MIN(p.gender)) FROM tb_cxr t "
            "LEFT JOIN patients p ON p.subject_id = t.subject_id GROUP BY 1, 2, 3 ORDER BY 1").fetchall()
    finally:
        conn.close()
    return pl.DataFrame(rows, schema=IMAGE_COLUMNS, orient="row")


def _copy(src: duckdb.DuckDBPyConnection, dst: duckdb.DuckDBPyConnection, table: str, sql: str) -> None:
    frame = src.execute(sql).pl()
    dst.execute(f"CREATE SCHEMA IF NOT EXISTS {table.split('.')[0]}")
    dst.register("_copy", frame)
    dst.execute(f"CREATE TABLE {table} AS SELECT * FROM _copy")
    dst.unregister("_copy")


def copied_tables(sides=SIDES, labels=()) -> list[str]:
    """The warehouse tables ``snapshot`` reads (besides ``ingest.silver_bbox``)."""
    return [*(f"splits.{side}" for side in sides), "cxr_labels.pairs", *(f"cxr_labels.{x}" for x in labels)]


def snapshot(con: duckdb.DuckDBPyConnection, extra: pl.DataFrame | None = None, top_folder: str | None = None,
             *, sides=SIDES, labels=()) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding ``splits.images`` (the split tables of ``sides``, in that order),
    ``cxr_labels.pairs``, ``cxr_labels.<x>`` for each of ``labels`` and the boxes of its images; ``extra``
    (image_id, subject_id, study_id, view_position, gender; optionally split, ctr, mtr) joins ``splits.images``
    (with split 'ehrxqa' unless it names one) where the image is not already there. ``top_folder`` (pNN): copy only the boxes of that folder's images (one
    inference partition)."""
    mem = duckdb.connect()
    for side in sides:
        frame = con.execute(f"SELECT * FROM splits.{side}").pl()
        mem.execute("CREATE SCHEMA IF NOT EXISTS splits")
        mem.register("_copy", frame)
        if side == sides[0]:
            mem.execute("CREATE TABLE splits.images AS SELECT * FROM _copy")
        else:
            mem.execute("INSERT INTO splits.images BY NAME SELECT * FROM _copy")
        mem.unregister("_copy")
    for table in copied_tables((), labels):
        _copy(con, mem, table, f"SELECT * FROM {table}")
    if extra is not None and extra.height:
        mem.register("_extra", extra)
        split = "" if "split" in extra.columns else f", '{EXTRA_SPLIT}' AS split"
        mem.execute(f"""
            INSERT INTO splits.images BY NAME
            SELECT e.*{split}, {image_relpath_sql('e.subject_id', 'e.study_id', 'e.image_id')} AS image_path
            FROM _extra e WHERE e.image_id NOT IN (SELECT image_id FROM splits.images)""")
        mem.unregister("_extra")
    ids = mem.execute("SELECT image_id FROM splits.images WHERE ? IS NULL OR image_path LIKE ? || '/%'",
                      [top_folder, top_folder]).pl()
    con.register("_snapshot_ids", ids)
    try:
        _copy(con, mem, "ingest.silver_bbox", """
            SELECT b.* FROM ingest.silver_bbox b
            WHERE left(b.object_id, length(b.object_id) - length(b.bbox_name) - 1) IN
                  (SELECT image_id FROM _snapshot_ids)""")
    finally:
        con.unregister("_snapshot_ids")
    return mem
