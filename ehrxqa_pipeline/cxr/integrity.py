"""JPEG integrity of the selected images: the file exists, decodes, and matches its metadata size.

Runs per MIMIC-CXR top folder (p10..p19) so partitions run in parallel or on a cluster. Decoding uses
Pillow's draft mode (the JPEG decoder scales by 1/8 while reading every entropy-coded block), which finds
truncated or corrupt files at a fraction of a full decode.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
from PIL import Image

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.sources.schema import image_relpath_sql

OK = "ok"
MISSING = "missing_jpeg"
UNDECODABLE = "undecodable_jpeg"
SIZE_MISMATCH = "size_mismatch"
JPEG_FAILURES = (MISSING, UNDECODABLE, SIZE_MISMATCH)

CONTRACT = load_contract("cxr_cohort.image_integrity")
SCHEMA = CONTRACT.polars_schema()


def candidates_sql(schema: str = "cxr_cohort") -> str:
    """Images of one top folder (parameter: its two digits, e.g. '10') that need a sound JPEG: every image
    passing rules 1-3 (either cohort) and every gold image."""
    return f"""
        SELECT dicom_id, {image_relpath_sql()} AS relpath, n_rows, n_columns
        FROM {schema}.image_rules
        WHERE substr(subject_id::VARCHAR, 1, 2) = ?
          AND ((frontal_view AND one_image_per_study AND max_20_studies)
               OR dicom_id IN (SELECT image_id FROM {schema}.gold_studies))
        ORDER BY dicom_id"""


def _check(files_dir: Path, relpath: str, rows: int, columns: int) -> tuple[str, str | None]:
    path = files_dir / relpath
    if not path.is_file():
        return MISSING, None
    try:
        with Image.open(path) as im:
            width, height = im.size
            im.draft("L", (max(1, width // 8), max(1, height // 8)))
            im.load()
    except Exception as e:  # Pillow raises several types for damaged files; the message names it
        return UNDECODABLE, f"{type(e).__name__}: {e}"[:200]
    if (width, height) != (columns, rows):
        return SIZE_MISMATCH, f"jpeg {height}x{width}, metadata {rows}x{columns}"
    return OK, None


def check_images(files_dir: Path, images: pl.DataFrame, partition: str, workers: int = 2) -> pl.DataFrame:
    """``images``: dicom_id, relpath, n_rows, n_columns. One output row per image with its status."""
    if images.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    with ThreadPoolExecutor(max_workers=workers) as pool:  # Pillow releases the GIL while decoding
        results = list(pool.map(lambda r: _check(files_dir, r[0], r[1], r[2]),
                                images.select("relpath", "n_rows", "n_columns").iter_rows()))
    return images.select("dicom_id", "relpath").with_columns(
        pl.lit(partition).alias("partition"),
        pl.Series("status", [r[0] for r in results], dtype=pl.String),
        pl.Series("detail", [r[1] for r in results], dtype=pl.String),
    ).select(list(SCHEMA))
