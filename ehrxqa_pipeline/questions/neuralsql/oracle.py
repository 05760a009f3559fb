"""The oracle VQA module: answers FUNC_VQA questions from the answer sheet TB_CXR_PLUS.

It maps each question back to one of the 48 MIMIC-CXR-VQA templates and its arguments
(``QuestionInverter``, in the paper's or EHRXQA's wording, ``mimic_cxr_vqa.templates.wordings``; matching is
case-insensitive since EHRXQA stores questions lower-cased) and answers
with that template's program (``mimic_cxr_vqa.programs.answers``) over the study's labels, so oracle answers and
MIMIC-CXR-VQA answers cannot disagree. Grain of the loaded labels: one row per affirmed (image, object,
attribute) of TB_CXR_PLUS (relation = 1); the pair pool is every (object, attribute, category) the sheet
lists; view position, CTR/MTR per image from the sheet, gender from PATIENTS.

Answers: verify templates -> bool; choose / query templates -> sorted list of names (possibly empty).
An image absent from the sheet, or a CTR/MTR question about an image without that ratio, gives None
(abstain), as the answer-sheet SQL finds no row there. A question that is no template, or that reads as two
different (template, arguments), raises OracleQuestionError: the oracle is a construction tool and such a
question is a bug in the query that asked it.

``LabelModule`` is the same answering over any ``VqaLabels`` (``OracleModule`` is it over the answer sheet;
``vqa.modules.ReferenceModule`` over a model's thresholded predictions).
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.questions.neuralsql.errors import OracleQuestionError
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import Answer, ImageRef
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import VqaLabels, answers, prepare_labels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import (CATEGORIES, GENDER_TEXT, SLOT_COLUMNS, TEMPLATES,
                                                     VIEW_POSITIONS, VqaTemplate, category_names, get_template,
                                                     wordings)

_SLOT = re.compile(r"\$\{(\w+)\}")
_SPACES = re.compile(r"\s+")
_RATIO = {"ct_ratio_1": "ctr", "mt_ratio_1": "mtr"}


def _norm(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower()).rstrip("?.").rstrip()


class QuestionInverter:
    """Question text -> (template, argument columns), over a known object / attribute vocabulary."""

    def __init__(self, objects: Iterable[str], attributes: Iterable[str]):
        words = {"object": {o.lower(): o for o in objects}, "attribute": {a.lower(): a for a in attributes},
                 "viewpos": {v.lower(): v for v in VIEW_POSITIONS},
                 "gender": {t.lower(): g for g, t in GENDER_TEXT.items()}}
        self._patterns: list[tuple[VqaTemplate, list]] = []
        for t, wording in ((t, w) for t in TEMPLATES for w in wordings(t)):
            parts = _SLOT.split(wording)  # literal, slot, literal, ..., literal
            pieces: list = []
            for i, part in enumerate(parts):
                if i % 2 == 0:
                    lit = part.lower().rstrip().rstrip("?.").rstrip() if i == len(parts) - 1 else part.lower()
                    if lit:
                        pieces.append(lit)
                    continue
                kind = SLOT_COLUMNS[part].rsplit("_", 1)[0] if part not in ("viewpos", "gender") else part
                if kind == "category":  # the wording mimic_cxr_vqa.templates renders: singular after "which"
                    names = category_names(parts[i - 1])
                    options = {names[c].lower(): c for c in CATEGORIES}
                else:
                    options = words[kind]
                pieces.append((SLOT_COLUMNS[part], sorted(options.items(), key=lambda kv: -len(kv[0]))))
            self._patterns.append((t, pieces))
        self._memo: dict[str, tuple[VqaTemplate, dict[str, str]]] = {}

    @classmethod
    def of(cls, objects: Iterable[str], attributes: Iterable[str]) -> QuestionInverter:
        """The inverter of this vocabulary, shared by every caller in the process (its answers depend on the
        vocabulary alone): the scores' modules, which ask the same questions, invert each text once."""
        return _shared_inverter(tuple(objects), tuple(attributes))

    @staticmethod
    def _parses(text: str, pieces: list, pos: int, args: dict) -> Iterator[dict]:
        if not pieces:
            if pos == len(text):
                yield dict(args)
            return
        head, rest = pieces[0], pieces[1:]
        if isinstance(head, str):
            if text.startswith(head, pos):
                yield from QuestionInverter._parses(text, rest, pos + len(head), args)
            return
        column, options = head
        for surface, value in options:
            if text.startswith(surface, pos) and args.get(column, value) == value:
                fresh = column not in args
                args[column] = value
                yield from QuestionInverter._parses(text, rest, pos + len(surface), args)
                if fresh:
                    del args[column]

    def invert(self, question: str) -> tuple[VqaTemplate, dict[str, str]]:
        """The unique (template, {argument column: value}) whose rendering is ``question`` (any case)."""
        text = _norm(question)
        if text in self._memo:
            return self._memo[text]
        found: dict[tuple, tuple[VqaTemplate, dict[str, str]]] = {}
        for t, pieces in self._patterns:
            for args in self._parses(text, pieces, 0, {}):
                found[(t.key, tuple(sorted(args.items())))] = (t, args)
        if not found:
            raise OracleQuestionError(f"question {question!r} matches none of the 48 MIMIC-CXR-VQA templates "
                                      "with the answer sheet's objects and attributes")
        if len(found) > 1:
            readings = "; ".join(f"{k} {dict(a)}" for k, a in found)
            raise OracleQuestionError(f"question {question!r} is ambiguous: {readings}")
        self._memo[text] = next(iter(found.values()))
        return self._memo[text]


@functools.lru_cache(maxsize=8)
def _shared_inverter(objects: tuple[str, ...], attributes: tuple[str, ...]) -> QuestionInverter:
    return QuestionInverter(objects, attributes)


def load_answer_sheet(conn: sqlite3.Connection, table: str = "tb_cxr_plus", patients: str = "patients") -> VqaLabels:
    """Labels of every image of the answer sheet (``mimic_cxr_vqa.programs.prepare_labels`` inputs from SQLite);
    ``patients`` names the table holding each subject's gender (e.g. ``db.patients`` when attached)."""
    def frame(sql: str, schema: dict) -> pl.DataFrame:
        return pl.DataFrame(conn.execute(sql).fetchall(), schema=schema, orient="row")

    s = pl.String
    pairs = frame(f"SELECT DISTINCT object, attribute, category FROM {table} "
                  "WHERE object IS NOT NULL AND attribute IS NOT NULL AND category IS NOT NULL",
                  {"object": s, "attribute": s, "category": s})
    positives = frame(f"SELECT DISTINCT CAST(image_id AS TEXT), object, attribute FROM {table} WHERE relation = 1",
                      {"image_id": s, "object": s, "attribute": s})
    images = frame(
        f"SELECT CAST(x.image_id AS TEXT), CAST(x.subject_id AS INTEGER), CAST(x.study_id AS INTEGER), "
        f"UPPER(x.viewposition), UPPER(p.gender), x.ctr, x.mtr FROM (SELECT image_id, MIN(subject_id) AS subject_id, "
        f"MIN(study_id) AS study_id, MIN(viewposition) AS viewposition, MIN(ct_ratio) AS ctr, "
        f"MIN(mt_ratio) AS mtr FROM {table} GROUP BY image_id) AS x "
        f"LEFT JOIN (SELECT subject_id, MIN(gender) AS gender FROM {patients} GROUP BY subject_id) AS p "
        "ON p.subject_id = x.subject_id",
        {"image_id": s, "subject_id": pl.Int64, "study_id": pl.Int64, "view_position": s, "gender": s,
         "ctr": pl.Float64, "mtr": pl.Float64})
    return prepare_labels(pairs, positives, images)


class LabelModule:
    """VQA module answering from any ``VqaLabels`` (answer sheet, reference-model predictions, ...): each
    question is inverted to (template, arguments) and answered with the template's program, grouped by template
    so one ``answers`` call serves every pair of a batch that shares a template. See the module docstring for
    the answer forms and when it abstains."""

    # Pairs per call that an executor asks (``NeuralSqlExecutor``): each answer is a lookup of its own pair, so
    # the batch changes no answer, while each call builds a frame per template it meets. With the executor's
    # default 32 those calls were most of the demo consistency check's first 6,000 items (2.7 s -> 1.3 s).
    batch_size = 4096
    reads_pixels = False  # answers by image id

    def __init__(self, labels: VqaLabels, name: str = "labels"):
        self.name, self.labels = name, labels
        self.inverter = QuestionInverter.of(labels.pairs["object"], labels.pairs["attribute"])
        img = labels.images
        self._ratios = {c: dict(zip(img["image_id"], img[c])) for c in ("ctr", "mtr")}

    def invert(self, question: str) -> tuple[VqaTemplate, dict[str, str]]:
        return self.inverter.invert(question)

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        out: list[Answer] = [None] * len(questions)
        groups: dict[str, list[tuple[int, str, dict]]] = defaultdict(list)
        for i, (image, question) in enumerate(zip(images, questions, strict=True)):
            t, args = self.invert(question)
            image_id = None if image is None else str(image.image_id)
            if image_id not in self._ratios["ctr"]:
                continue  # image not in the labels: abstain
            ratio = _RATIO.get(t.key)
            if ratio and self._ratios[ratio][image_id] is None:
                continue  # no CTR / MTR for this image: abstain
            groups[t.key].append((i, image_id, args))
        for key, items in groups.items():
            t = get_template(key)
            frame = pl.DataFrame({"image_id": [im for _, im, _ in items],
                                  **{c: [a[c] for _, _, a in items] for c in t.columns}},
                                 schema={"image_id": pl.String, **{c: pl.String for c in t.columns}})
            for (i, _, _), ans in zip(items, answers(t, frame, self.labels).to_list()):
                out[i] = ans == ["yes"] if t.semantic_type == "verify" else list(ans)
        return out


class OracleModule(LabelModule):
    """VQA module answering from the answer sheet (see the module docstring)."""

    name = "oracle"

    def __init__(self, answer_sheet: str | Path | sqlite3.Connection, *, table: str = "tb_cxr_plus",
                 database: str | Path | None = None):
        """``database``: the user-facing mimic_iv_cxr.db, attached read-only for PATIENTS.gender when the
        answer sheet is a separate file (as the pipeline exports it)."""
        if isinstance(answer_sheet, sqlite3.Connection):
            labels = load_answer_sheet(answer_sheet, table)
        else:
            if not Path(answer_sheet).is_file():
                raise FileNotFoundError(f"answer sheet database not found: {answer_sheet}")
            conn = sqlite3.connect(f"{Path(answer_sheet).resolve().as_uri()}?mode=ro", uri=True)
            try:
                patients = "patients"
                if database is not None:
                    if not Path(database).is_file():
                        raise FileNotFoundError(f"database not found: {database}")
                    conn.execute("ATTACH DATABASE ? AS db", [f"{Path(database).resolve().as_uri()}?mode=ro"])
                    patients = "db.patients"
                labels = load_answer_sheet(conn, table, patients)
            finally:
                conn.close()
        super().__init__(labels, "oracle")
