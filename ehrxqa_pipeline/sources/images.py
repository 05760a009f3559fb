"""The MIMIC-CXR-JPG image tree: ``files/pNN/pSUBJECT/sSTUDY/DICOM_ID.jpg``.

Listing walks the tree with ``os.scandir`` (one directory read per folder, no globbing), optionally one
top folder at a time so image work can be partitioned by ``p10``..``p19``. Entries that do not follow the
layout (stray files, ``index.html``, other extensions) are ignored.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import polars as pl

from .errors import SourceError
from .layout import SourceLayout, as_layout
from .schema import CXR_FILES_DIR, MIMIC_CXR

IMAGE_SCHEMA = {"relpath": pl.String, "subject_id": pl.Int64, "study_id": pl.Int64, "dicom_id": pl.String,
                "bytes": pl.Int64}
_TOP = re.compile(r"p\d\d")
_SUBJECT = re.compile(r"p(\d+)")
_STUDY = re.compile(r"s(\d+)")


def image_relpath_expr(subject_id: str = "subject_id", study_id: str = "study_id",
                       dicom_id: str = "dicom_id") -> pl.Expr:
    """Polars twin of ``schema.image_relpath``: ``p10/p10000032/s50414267/<dicom_id>.jpg``."""
    subject = pl.col(subject_id).cast(pl.String)
    return pl.concat_str([pl.lit("p"), subject.str.slice(0, 2), pl.lit("/p"), subject, pl.lit("/s"),
                          pl.col(study_id).cast(pl.String), pl.lit("/"), pl.col(dicom_id), pl.lit(".jpg")])


def _dirs(path: str, pattern: re.Pattern) -> list[tuple[str, str]]:
    try:
        with os.scandir(path) as it:
            return sorted((e.name, e.path) for e in it if pattern.fullmatch(e.name) and e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def images_dir(root: Path | SourceLayout) -> Path:
    """The ``files/`` folder of the MIMIC-CXR-JPG release below the source root."""
    return as_layout(root).path(MIMIC_CXR, CXR_FILES_DIR)


def _images_dir_or_none(root: Path | SourceLayout) -> str | None:
    try:
        return str(images_dir(root))
    except SourceError:
        return None


def list_images(root: Path | SourceLayout, prefix: str | None = None) -> pl.DataFrame:
    """One row per JPEG below ``files/`` (or below ``files/<prefix>``), sorted by ``relpath``.

    Columns: relpath (relative to ``files/``), subject_id, study_id, dicom_id, bytes. An empty frame with
    those columns when the tree (or the prefix folder) is absent.
    """
    if prefix is not None and not _TOP.fullmatch(prefix):
        raise ValueError(f"image partition must look like 'p10', got {prefix!r}")
    base = _images_dir_or_none(root)
    if base is None:
        tops = []
    else:
        tops = [(prefix, os.path.join(base, prefix))] if prefix else _dirs(base, _TOP)
    rel, subj, study, dicom, size = [], [], [], [], []
    for top, top_path in tops:
        for sname, spath in _dirs(top_path, _SUBJECT):
            subject_id = int(sname[1:])
            for tname, tpath in _dirs(spath, _STUDY):
                study_id = int(tname[1:])
                with os.scandir(tpath) as it:
                    files = sorted((e.name, e) for e in it if e.name.endswith(".jpg") and e.is_file())
                for fname, entry in files:
                    rel.append(f"{top}/{sname}/{tname}/{fname}")
                    subj.append(subject_id)
                    study.append(study_id)
                    dicom.append(fname[:-4])
                    size.append(entry.stat().st_size)
    return pl.DataFrame({"relpath": rel, "subject_id": subj, "study_id": study, "dicom_id": dicom,
                         "bytes": size}, schema=IMAGE_SCHEMA).sort("relpath")
