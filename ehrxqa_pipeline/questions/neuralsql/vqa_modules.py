"""The VQA-module interface FUNC_VQA calls, image references, and the constant "yes" baseline.

A module answers a batch: ``module(images, questions)`` gets two lists of equal length (pair i = ask
``questions[i]`` about ``images[i]``; one batch may mix studies and questions) and returns one answer per
pair:

- ``True`` / ``False`` for yes/no (verify) questions;
- ``list[str]`` for list / choice questions ("list all ...", "which ..., a or b?", "what is ...?"),
  possibly empty (nothing matches) -- one SQL row per element where the call is a bare select item;
- ``None`` when the module abstains (no image, no confident answer): FUNC_VQA yields SQL NULL.

``normalise_answer`` is the one place that turns what a module returned into those three forms.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ehrxqa_pipeline.questions.neuralsql.errors import VqaModuleError

Answer = bool | list[str] | None


@dataclass(frozen=True)
class ImageRef:
    """The image of one study (TB_CXR has one image per study); ``path`` is None when no file exists."""

    study_id: int
    image_id: str
    subject_id: int
    path: Path | None = None


@runtime_checkable
class VqaModule(Protocol):
    """Answers image questions in batches; see the module docstring for the answer forms."""

    name: str

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]: ...


def reads_pixels(module) -> bool:
    """Whether ``module`` opens ``ImageRef.path``: True unless it says ``reads_pixels = False`` (the constant,
    the priors and the label modules, which answer from the question and the image id). Callers look for the
    JPEG files only for a module that reads them."""
    return getattr(module, "reads_pixels", True)


class YesModule:
    """The constant baseline of the published executor ("yes"/"debug" module): ``True`` for every question.

    List and choice questions get ``True`` too (one row ``1`` where the call is a select item), so the
    baseline is simply wrong on them rather than abstaining; this keeps its scores comparable with the
    published baseline, which also answers True to everything.
    """

    name = "yes"
    reads_pixels = False

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        return [True] * len(questions)


def image_path(root: Path, subject_id: int, study_id: int, image_id: str) -> Path:
    """MIMIC-CXR-JPG layout: ``p{first 2 digits of subject}/p{subject}/s{study}/{image_id}.jpg``."""
    s = str(subject_id)
    return Path(root) / f"p{s[:2]}" / f"p{s}" / f"s{study_id}" / f"{image_id}.jpg"


def as_int(value) -> int | None:
    """An id from SQLite as int (ids may be stored REAL or TEXT); None for NULL or a non-integral value."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        v = value.strip()
        if v.endswith(".0"):
            v = v[:-2]
        return int(v) if v.isdigit() else None
    return int(value)


def resolve_images(conn: sqlite3.Connection, study_ids: Iterable[int],
                   images_root: str | Path | None = None) -> dict[int, ImageRef]:
    """ImageRef of each study found in TB_CXR (studies not there are absent from the result).

    Several TB_CXR rows for one study (the builder asserts one image per study) resolve to the smallest
    image_id, so the choice is deterministic. Missing JPEG files give ``path=None``.
    """
    wanted = sorted({int(s) for s in study_ids})
    found: dict[int, ImageRef] = {}
    for i in range(0, len(wanted), 500):  # stay below SQLite's bound-parameter limit
        chunk = wanted[i:i + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(f"SELECT study_id, image_id, subject_id FROM tb_cxr WHERE study_id IN ({marks}) "
                            "ORDER BY study_id, image_id", chunk).fetchall()
        for study, image, subject in rows:
            key = as_int(study)
            if key in found:
                continue
            path = None
            if images_root is not None:
                p = image_path(Path(images_root), as_int(subject), key, str(image))
                path = p if p.is_file() else None
            found[key] = ImageRef(key, str(image), as_int(subject), path)
    return found


def normalise_answer(raw, module: str = "module") -> Answer:
    """One returned answer in canonical form.

    bool -> bool; None -> None; "yes"/"no" (any case) -> True/False, and so do ["yes"] / ["no"] (the
    oracle's verify form); any other string -> a one-element list; a list/tuple of strings -> list of
    lower-cased, stripped strings (an empty list stays empty: "nothing found" is an answer, not an
    abstention). Anything else (numbers, nested lists) is a VqaModuleError.
    """
    if raw is None or isinstance(raw, bool):
        return raw
    if type(raw).__name__ == "bool_":  # numpy.bool_ without importing numpy
        return bool(raw)
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(raw, (list, tuple)):
        if not all(isinstance(x, str) for x in raw):
            raise VqaModuleError(f"VQA module {module!r} returned a list with non-string items: {raw!r}")
        items = [x.strip().lower() for x in raw]
        if items in (["yes"], ["no"]):
            return items == ["yes"]
        return items
    raise VqaModuleError(f"VQA module {module!r} returned {type(raw).__name__} {raw!r}; "
                         "expected bool, list[str] or None")


def ask(module: VqaModule, images: Sequence[ImageRef], questions: Sequence[str]) -> list[Answer]:
    """Call a module on one batch and check its contract (one answer per pair, canonical forms)."""
    name = getattr(module, "name", type(module).__name__)
    raw = module(list(images), list(questions))
    if not isinstance(raw, (list, tuple)) or len(raw) != len(questions):
        got = len(raw) if isinstance(raw, (list, tuple)) else type(raw).__name__
        raise VqaModuleError(f"VQA module {name!r} returned {got} answers for {len(questions)} questions")
    return [normalise_answer(a, name) for a in raw]
