"""MIMIC-CXR-VQA records in the published JSON format (reference-builders.md 4.4).

One record per sampled question, fields in this order: split, idx, subject_id, study_id, image_id,
image_path, question, semantic_type, content_type, template, template_program, template_arguments,
answer. ``template_arguments`` is {"object": {"0": ..., "1": ...}, "attribute": {}, "category": {},
"viewpos": {}, "gender": {}} with raw category ids, viewpos AP/PA and gender M/F, as published.

Paraphrases: when the question frame has a ``paraphrase`` column (a phrasing of the template with the same
``${...}`` slots, ``paraphrase.choose_vqa_phrasings``), ``question`` is that phrasing filled with the
arguments and ``template`` is the phrasing, as in the published files (whose ``template`` is the paraphrased
template; ``template_program`` names the original). Without it, both come from the template itself.

Deliberate difference from the published files: subject_id and study_id are JSON integers. The published
builder serialised numpy integers with ``default=str``, so they came out as strings by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from ehrxqa_pipeline import atomic
from ehrxqa_pipeline.atomic import write_json
from ehrxqa_pipeline.hashing import combine, file_digest, frame_digest
from ehrxqa_pipeline.paraphrase.placeholders import leftovers
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import (ARGUMENT_KINDS, GENDER_TEXT, SLOT_COLUMNS, TEMPLATES,
                                                     VqaTemplate, category_names, question_expr)

RECORD_FIELDS = ("split", "idx", "subject_id", "study_id", "image_id", "image_path", "question", "semantic_type",
                 "content_type", "template", "template_program", "template_arguments", "answer")
# The release's field dictionary (croissant.json's record sets): field, JSON type, meaning; in RECORD_FIELDS order
FIELD_DICTIONARY = (
    ("split", "string", "`train`, `valid` or `test`"),
    ("idx", "integer", "position in the split file, from 0"),
    ("subject_id", "integer", "MIMIC-CXR-JPG's patient id"),
    ("study_id", "integer", "MIMIC-CXR-JPG's study id"),
    ("image_id", "string", "MIMIC-CXR-JPG's `dicom_id` of the image"),
    ("image_path", "string", "the JPEG's path under MIMIC-CXR-JPG's `files/` folder "
                             "(`pXX/pSUBJECT/sSTUDY/DICOM_ID.jpg`)"),
    ("question", "string", "the question asked: `template` filled with the arguments"),
    ("semantic_type", "string", "`verify`, `choose` or `query`"),
    ("content_type", "string", "what is asked: e.g. `presence`, `anatomy`, `attribute`, `abnormality`, `plane`, "
                               "`gender`, `size`"),
    ("template", "string", "the question template (a paraphrase of it where the release has one) with `${...}` "
                           "slots"),
    ("template_program", "string", "the template's program, e.g. `program_1`: the original template"),
    ("template_arguments", "object", "the slot values: {\"object\", \"attribute\", \"category\", \"viewpos\", "
                                     "\"gender\"}, each an object from slot number (\"0\", \"1\") to its value (Chest "
                                     "ImaGenome ids, viewpos AP / PA, gender M / F), `{}` where unused"),
    ("answer", "array", "the answers (strings), `[]` when none"),
)


def _slot_words(t: VqaTemplate) -> dict[str, pl.Expr]:
    """Each slot's readable words, in the number the template's own wording uses (singular category after
    "Which", plural elsewhere), so a phrasing is filled as its template would be."""
    out = {}
    for slot in t.slots:
        col = pl.col(SLOT_COLUMNS[slot])
        if slot.startswith("category"):
            before = t.text[:t.text.index("${" + slot + "}")]
            col = col.replace_strict(category_names(before),
                                     return_dtype=pl.String)
        elif slot == "gender":
            col = col.replace_strict(GENDER_TEXT, return_dtype=pl.String)
        out[slot] = col
    return out


def phrasing_expr(t: VqaTemplate) -> pl.Expr:
    """The ``paraphrase`` column with every slot of ``t`` filled from the argument columns."""
    expr = pl.col("paraphrase")
    for slot, words in _slot_words(t).items():
        expr = expr.str.replace_all("${" + slot + "}", words, literal=True)
    return expr.alias("question")


def _template_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """Adds question, semantic_type, content_type, template, template_program (one pass per template)."""
    parts = []
    phrased = "paraphrase" in frame.columns
    for t in TEMPLATES:
        part = frame.filter(pl.col("template_key") == t.key)
        if part.height:
            parts.append(part.with_columns(phrasing_expr(t) if phrased else question_expr(t),
                                           semantic_type=pl.lit(t.semantic_type), content_type=pl.lit(t.content_type),
                                           template=pl.col("paraphrase") if phrased else pl.lit(t.text),
                                           template_program=pl.lit(t.program)))
    unknown = set(frame["template_key"]) - {t.key for t in TEMPLATES}
    if unknown:
        raise ValueError(f"questions: unknown template keys {sorted(unknown)}")
    return pl.concat(parts).sort("_q") if parts else frame


def record_frame(questions: pl.DataFrame, images: pl.DataFrame) -> pl.DataFrame:
    """The record columns as a frame (argument columns kept flat), in the order of ``questions``;
    ``idx`` counts from 0 within each split."""
    q = questions.with_row_index("_q").join(
        images.select("image_id", "subject_id", "study_id", "image_path"), on="image_id", how="left",
        maintain_order="left")
    if q["subject_id"].null_count() or q["image_path"].null_count():
        raise ValueError("questions name images that are missing from images (or lack subject_id/image_path)")
    q = _template_columns(q).with_columns(idx=pl.int_range(pl.len()).over("split"))
    arg_cols = [c for cols in ARGUMENT_KINDS.values() for c in cols]
    return q.select(*[c for c in RECORD_FIELDS if c not in ("template_arguments",)], *arg_cols)


def _arguments(values: tuple) -> dict:
    out, i = {}, 0
    for kind, cols in ARGUMENT_KINDS.items():
        vals = values[i:i + len(cols)]
        i += len(cols)
        out[kind] = {str(k): v for k, v in enumerate(vals) if v is not None}
    return out


def build_records(questions: pl.DataFrame, images: pl.DataFrame) -> dict[str, list[dict]]:
    """Split -> list of records (dicts in RECORD_FIELDS order), from ``sample_vqa(...).questions``."""
    out: dict[str, list[dict]] = {}
    for rec in frame_records(record_frame(questions, images)):
        out.setdefault(rec["split"], []).append(rec)
    return out


def frame_records(f: pl.DataFrame) -> list[dict]:
    """The records of ``record_frame`` rows, in their order. Building the dicts is the one per-row step: it only
    formats output for ``json``."""
    n_args = sum(len(c) for c in ARGUMENT_KINDS.values())
    head = [c for c in RECORD_FIELDS if c not in ("template_arguments", "answer")]
    cols = [f[c].to_list() for c in head]
    args = [f[c].to_list() for c in f.columns[-n_args:]]
    answers = f["answer"].to_list()
    out = []
    for i, row in enumerate(zip(*cols)):
        rec = dict(zip(head, row))
        rec["template_arguments"] = _arguments(tuple(a[i] for a in args))
        rec["answer"] = answers[i]
        out.append(rec)
    return out


def placeholder_problems(records: Mapping[str, list[dict]]) -> list[str]:
    """Released questions with a placeholder left, or missing one of their argument values."""
    bad = []
    for split, rows in records.items():
        for r in rows:
            q = r["question"].lower()
            values = [v for kind, vals in r["template_arguments"].items() if kind not in ("category", "gender")
                      for v in vals.values()]
            if leftovers(r["question"]) or any(str(v).lower() not in q for v in values):
                bad.append(f"{split}/{r['idx']}: {r['question']}")
    return bad


def field_types(records: Sequence[dict]) -> dict[str, str]:
    """Each field's type name in first-seen order: that of its first non-null value ("null" if none)."""
    types: dict[str, str] = {}
    for record in records:  # one loop over the values (a merge of per-record types is 2.6x slower)
        for name, value in record.items():
            if types.get(name, "null") == "null":
                types[name] = "null" if value is None else type(value).__name__
    return types


def merged_types(parts: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """``field_types`` of records in turn, from the ``field_types`` of each part (e.g. of each split's file)."""
    types: dict[str, str] = {}
    for part in parts:
        for name, kind in part.items():
            if types.get(name, "null") == "null":
                types[name] = kind
    return types


# What a split file is made from besides its rows: this module (the record format), the JSON writer, polars.
_CODE = combine(file_digest(Path(__file__)), file_digest(Path(atomic.__file__)), pl.__version__)


def write_splits(questions: pl.DataFrame, images: pl.DataFrame, out_dir: Path, splits: Sequence[str],
                 memo: Path | None = None) -> dict[str, dict]:
    """``out_dir/<split>.json`` for each of ``splits`` (``write_split_json``), with the records of
    ``build_records(questions, images)``. Returns split -> {"records": count, "types": ``field_types``,
    "placeholder_problems": ``placeholder_problems``, "para_types": questions per ``para_type``}. ``memo``
    (``release.memo.OutputMemo``): a split whose rows are those of its file's last writing, and whose file
    still holds what was written, is left as it is; a gold label edit (test questions) then writes the test
    file only."""
    f, done, out = record_frame(questions, images), OutputMemo(memo), {}
    kinds = questions["para_type"] if "para_type" in questions.columns else pl.Series([None] * questions.height)
    for split in splits:
        part, path = f.filter(pl.col("split") == split).rechunk(), Path(out_dir) / f"{split}.json"
        inputs = combine(frame_digest(part), _CODE)
        facts = done.kept(split, inputs, path)
        if facts is None:
            records = frame_records(part)
            write_split_json(records, path)
            para = kinds.filter(questions["split"] == split).drop_nulls().value_counts(sort=True, name="n")
            facts = done.record(split, inputs, file_digest(path), {
                "records": len(records), "types": field_types(records),
                "placeholder_problems": placeholder_problems({split: records}),
                "para_types": dict(sorted(zip(para[para.columns[0]].to_list(), para["n"].to_list())))})
        out[split] = facts
    done.save()
    return out


def write_side(load: Callable[[], tuple[pl.DataFrame, pl.DataFrame]], inputs: str, out_dir: Path,
               splits: Sequence[str], memo: Path) -> dict[str, dict]:
    """``write_splits`` of one side's ``splits`` (silver: train and valid; gold: test) from ``load()``: its
    (phrased) questions and its images. ``inputs``: a digest of everything they are made from (the side's
    tables, the pools, the seed, the side's place in the phrasing draws), known before reading them: when each
    split's file was last written from the same ``inputs`` and still holds what was written, ``load`` is never
    called (a gold label edit does not read the silver side's 364k questions). Same files and facts."""
    done = OutputMemo(memo)
    inputs = combine(inputs, _CODE)
    paths = {split: Path(out_dir) / f"{split}.json" for split in splits}
    kept = {split: done.kept(f"{split}@side", inputs, path) for split, path in paths.items()}
    if all(facts is not None for facts in kept.values()):
        return kept
    out = write_splits(*load(), out_dir, splits, memo=memo)
    done = OutputMemo(memo)  # (as write_splits saved it)
    for split, path in paths.items():
        done.record(f"{split}@side", inputs, file_digest(path), out[split])
    done.save()
    return out


def write_split_json(records: list[dict], path: str | Path) -> None:
    """Write one split's records as a JSON array (indent 2, field order as given, record order kept),
    atomically: a temporary file in the same folder is renamed over ``path``."""
    write_json(path, records, indent=2)
