"""Which MIMIC-CXR-JPG images to download: for the build, and per split of the release.

MIMIC-CXR-JPG is about 570 GB; the build reads only the images that pass the metadata rules (frontal view,
one image per study, StudyOrder <= 20: the JPEG integrity candidates, ``integrity.candidates_sql``) and the
gold images. That list depends on the metadata and the Chest ImaGenome gold file only, so it is written
before any JPEG is read: download the tables, build ``cxr_cohort/image_downloads`` (``ehrxqa build --select
'+key:cxr_cohort/image_downloads'``), fetch the listed images, then build everything. Per split, the lists
name the images each split of the release uses (MIMIC-CXR-VQA train / valid / test; the test list adds every
gold-cohort image, which the EHRXQA test database draws from).

Each list is a CSV (dicom_id, subject_id, study_id, relpath below ``files/``) and a URL file that wget
takes (``wget -i``); file sizes are not published in the metadata, so none are listed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl

from ehrxqa_pipeline.atomic import write_text
from ehrxqa_pipeline.cxr.integrity import candidates_sql
from ehrxqa_pipeline.hashing import combine, file_digest
from ehrxqa_pipeline.names import DATASET_SPLITS, SIDE_SPLITS
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.sources.schema import CXR_FILES_DIR, MIMIC_CXR, image_relpath_sql

OUT_DIR = "images"  # below EHRXQA_HOME/release
BUILD_LIST = "build"
SPLITS = DATASET_SPLITS
COLUMNS = ("dicom_id", "subject_id", "study_id", "relpath")
README = "README.md"


def base_url(cxr_version: str) -> str:
    return f"https://physionet.org/files/{MIMIC_CXR}/{cxr_version}/{CXR_FILES_DIR}/"


def build_images(con: duckdb.DuckDBPyConnection, schema: str = "cxr_cohort") -> pl.DataFrame:
    """Every image the build reads (the integrity candidates of all top folders), sorted by relpath."""
    per_partition = candidates_sql(schema).replace("substr(subject_id::VARCHAR, 1, 2) = ?", "TRUE")
    return con.execute(f"""
        SELECT c.dicom_id, r.subject_id, r.study_id, c.relpath
        FROM ({per_partition}) c JOIN {schema}.image_rules r USING (dicom_id)
        ORDER BY c.relpath""").pl()


def split_images(con: duckdb.DuckDBPyConnection, side: str) -> dict[str, pl.DataFrame]:
    """Per split of ``side`` (``names.SIDE_SPLITS``), the images the release uses: the split's rows of the
    side's table (``splits.silver`` for train and valid, ``splits.gold`` for test), plus every gold-cohort image
    in test (the EHRXQA test database samples its patients' studies from the gold cohort)."""
    relpath = image_relpath_sql(image="image_id")
    out = {}
    for split in SIDE_SPLITS[side]:
        gold = (f" UNION SELECT image_id AS dicom_id, subject_id, study_id, {relpath} AS relpath "
                f"FROM cxr_cohort.gold" if side == "gold" else "")
        out[split] = con.execute(f"""
            SELECT image_id AS dicom_id, subject_id, study_id, {relpath} AS relpath
            FROM splits.{side} WHERE split = ?{gold}
            ORDER BY relpath""", [split]).pl()
    return out


def side_tables(side: str) -> list[str]:
    """The tables ``split_images(con, side)`` reads."""
    return [f"splits.{side}", *(["cxr_cohort.gold"] if side == "gold" else [])]


# What a list is made from besides its rows: this module (the formats, the URL) and polars (the CSV writer)
_CODE = combine(file_digest(Path(__file__)), pl.__version__)


def write_side_lists(load: Callable[[], dict[str, pl.DataFrame]], inputs: str, folder: Path, side: str,
                     cxr_version: str, memo: OutputMemo) -> dict[str, int]:
    """``write_list`` of each split of ``side`` from ``load()`` (``split_images``); split -> images.
    ``inputs``: a digest of the tables ``load`` reads (``side_tables``): when every list of the side was last
    written from the same inputs and version and its files still hold what was written, ``load`` is never
    called and nothing is written (a gold label edit leaves the train list's 200,000 lines as they are)."""
    inputs = combine(inputs, cxr_version, _CODE)
    files = {split: list_files(folder, split) for split in SIDE_SPLITS[side]}
    kept = {split: [memo.kept(path.name, inputs, path) for path in paths] for split, paths in files.items()}
    if all(facts is not None for both in kept.values() for facts in both):
        return {split: both[0]["images"] for split, both in kept.items()}
    out = {}
    for split, frame in load().items():
        for path in write_list(frame, folder, split, cxr_version):
            memo.record(path.name, inputs, file_digest(path), {"images": frame.height})
        out[split] = frame.height
    return out


def list_files(folder: Path, name: str) -> list[Path]:
    """The files of image list ``name``: ``<name>.csv`` and ``<name>_urls.txt`` under ``folder``."""
    return [folder / f"{name}.csv", folder / f"{name}_urls.txt"]


def write_list(frame: pl.DataFrame, folder: Path, name: str, cxr_version: str) -> list[Path]:
    """``list_files(folder, name)`` (written atomically)."""
    csv = frame.select(COLUMNS).write_csv()
    url = base_url(cxr_version)
    urls = "".join(f"{url}{p}\n" for p in frame["relpath"].to_list())
    return [write_text(path, text) for path, text in zip(list_files(folder, name), (csv, urls))]


def readme(cxr_version: str, counts: dict[str, int]) -> str:
    lines = [
        "# MIMIC-CXR-JPG images to download",
        "",
        f"Images below `{MIMIC_CXR}/{cxr_version}/{CXR_FILES_DIR}/` of the source root. Each list is a CSV "
        "(dicom_id, subject_id, study_id, relpath) and a URL file.",
        "",
        "| list | images | what it is for |",
        "|---|---:|---|",
    ]
    what = {BUILD_LIST: "every image the build reads: download these to build everything",
            "train": "MIMIC-CXR-VQA train", "valid": "MIMIC-CXR-VQA valid (and the EHRXQA train/valid database)",
            "test": "MIMIC-CXR-VQA test and every gold-cohort image (the EHRXQA test database)"}
    lines += [f"| `{name}` | {n:,} | {what[name]} |" for name, n in counts.items()]
    lines += [
        "",
        "Download with your PhysioNet credentials into the source root (PhysioNet's folder layout is kept):",
        "",
        "```",
        "wget -N -c -x -nH --cut-dirs=1 --user YOUR_PHYSIONET_USER --ask-password \\",
        f"     -P \"$EHRXQA_SOURCE_ROOT\" -i {BUILD_LIST}_urls.txt",
        "```",
        "",
    ]
    return "\n".join(lines)


def write_readme(folder: Path, cxr_version: str) -> Path:
    """The README over every list present in ``folder`` (counts read back from the CSVs)."""
    counts = {name: pl.scan_csv(folder / f"{name}.csv").select(pl.len()).collect().item()
              for name in (BUILD_LIST, *SPLITS) if (folder / f"{name}.csv").is_file()}
    return write_text(folder / README, readme(cxr_version, counts))
