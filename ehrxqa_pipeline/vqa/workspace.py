"""The reference model's working copy of the warehouse.

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
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from ehrxqa_pipeline.cxr.ratios import GOLD_BOXES_SQL, ratios_sql, silver_boxes_of, test_image_ratio
from ehrxqa_pipeline.cxr.splits import SIDES
from ehrxqa_pipeline.sources.schema import image_relpath_sql

EXTRA_SPLIT = "ehrxqa"

# Every gold-cohort image, in the form of ``snapshot``'s ``extra`` rows: the first studies (the test images, and
# so split 'test') with their CTR / MTR as splits.gold computes them (``test_image_ratio``), and the later studies
# the gold database asks about (split EXTRA_SPLIT). From the cohort and the boxes, not from splits.gold, whose
# rows also say which images are abnormal: the predictions that read it do not depend on any label (issue 23).
GOLD_COHORT_IMAGES_SQL = f"""
    WITH s AS ({ratios_sql(silver_boxes_of("SELECT image_id FROM cxr_cohort.gold"))}),
         g AS ({ratios_sql(GOLD_BOXES_SQL)})
    SELECT c.image_id, c.subject_id, c.study_id, c.view_position, NULL::VARCHAR AS gender,
           CASE WHEN c.study_order = 1 THEN 'test' ELSE '{EXTRA_SPLIT}' END AS split,
           CASE WHEN c.study_order = 1 THEN {test_image_ratio('ctr')} END AS ctr,
           CASE WHEN c.study_order = 1 THEN {test_image_ratio('mtr')} END AS mtr
    FROM cxr_cohort.gold c LEFT JOIN s USING (image_id) LEFT JOIN g USING (image_id)
    ORDER BY c.image_id"""


def _create(dst: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    dst.execute(f"CREATE SCHEMA IF NOT EXISTS {table.split('.')[0]}")
    dst.register("_copy", frame)
    dst.execute(f"CREATE TABLE {table} AS SELECT * FROM _copy")
    dst.unregister("_copy")


def _copy(src: duckdb.DuckDBPyConnection, dst: duckdb.DuckDBPyConnection, table: str, sql: str) -> None:
    _create(dst, table, src.execute(sql).pl())


def copied_tables(sides=SIDES, labels=()) -> list[str]:
    """The warehouse tables ``snapshot`` reads (besides ``ingest.silver_bbox``)."""
    return [*(f"splits.{side}" for side in sides), "cxr_labels.pairs", *(f"cxr_labels.{x}" for x in labels)]


def snapshot(con: duckdb.DuckDBPyConnection, extra: pl.DataFrame | None = None,
             top_folders: list[str] | None = None,
             *, sides=SIDES, labels=(), path: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding ``splits.images`` (the split tables of ``sides``, in that order),
    ``cxr_labels.pairs``, ``cxr_labels.<x>`` for each of ``labels`` and the boxes of its images; ``extra``
    (image_id, subject_id, study_id, view_position, gender; optionally split, ctr, mtr) joins ``splits.images``
    (with split 'ehrxqa' unless it names one) where the image is not already there. ``top_folders`` (pNN):
    copy only the boxes of those folders' images (inference partitions). ``path``: a new DuckDB file instead of
    memory (for the out-of-process worker, ``cli.vqa_worker``; close the returned connection before it reads)."""
    if path is not None:
        Path(path).unlink(missing_ok=True)
    mem = duckdb.connect(":memory:" if path is None else str(path))
    _create(mem, "splits.images", pl.concat([con.execute(f"SELECT * FROM splits.{side}").pl() for side in sides],
                                            how="vertical_relaxed"))  # the sides one after the other
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
    ids = mem.execute("SELECT image_id FROM splits.images WHERE ?::VARCHAR[] IS NULL "
                      "OR list_contains(?::VARCHAR[], split_part(image_path, '/', 1))",
                      [top_folders, top_folders]).pl()
    con.register("_snapshot_ids", ids)
    try:
        _copy(con, mem, "ingest.silver_bbox", """
            SELECT b.* FROM ingest.silver_bbox b
            WHERE left(b.object_id, length(b.object_id) - length(b.bbox_name) - 1) IN
                  (SELECT image_id FROM _snapshot_ids)""")
    finally:
        con.unregister("_snapshot_ids")
    return mem
