"""Shared hand-made data for the scoring tests (metrics, baselines, modules, scoring, robustness).

Labels: the pool, studies and affirmed pairs of the hand-built EHRXQA database (``tests.ehrxqa``): images
img11, img12, img13, img21, img22, img31 with the views, genders and ratios listed there.
``QUESTIONS``: 12 MIMIC-CXR-VQA test rows about img12 and img21 whose answers are worked out by hand below.
``merged_db``: the table-template database (``tests.ehrxqa.table_db``) plus the image database's TB_CXR and
TB_CXR_PLUS (its admissions 101 / 102 / 201 mapped to 11 / 12 / 22), so one gold database serves image,
table and image+table items.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import prepare_labels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ARGUMENT_COLUMNS
from ehrxqa_pipeline.vqa.predictions import IMAGES_SCHEMA, RELATIONS_SCHEMA, Predictions
from tests.ehrxqa import AFFIRMED, POOL, STUDIES, build_db
from tests.ehrxqa.table_db import build_table_db

GENDER = {1: "F", 2: "M", 3: "F"}
PAIRS = pl.DataFrame(POOL, schema=["object", "attribute", "category"], orient="row")
IMAGES = pl.DataFrame(
    [(f"img{s}", subj, s, "test", view.upper(), GENDER[subj], f"p{str(subj)[:2]}/p{subj}/s{s}/img{s}.jpg", ct, mt)
     for s, subj, _, _, view, ct, mt in STUDIES],
    schema={"image_id": pl.String, "subject_id": pl.Int64, "study_id": pl.Int64, "split": pl.String,
            "view_position": pl.String, "gender": pl.String, "image_path": pl.String, "ctr": pl.Float64,
            "mtr": pl.Float64}, orient="row")
POSITIVES = pl.DataFrame([(f"img{s}", o, a) for s, pairs in AFFIRMED.items() for o, a in sorted(pairs)],
                         schema=["image_id", "object", "attribute"], orient="row")


def gold_labels():
    return prepare_labels(PAIRS, POSITIVES, IMAGES)


def question_frame(rows: list[dict], split: str = "test") -> pl.DataFrame:
    """A ``mimic_cxr_vqa.questions``-shaped frame from dicts (missing argument columns are null)."""
    schema = {"split": pl.String, "template_key": pl.String, "image_id": pl.String,
              **{c: pl.String for c in ARGUMENT_COLUMNS}, "answer": pl.List(pl.String)}
    return pl.DataFrame([{"split": split, **r} for r in rows], schema=schema)


RL, LL, PE, LO = "right lung", "left lung", "pleural effusion", "lung opacity"
# img12: affirmed (left lung, lung opacity), (right lung, pleural effusion), (svc, picc); PA; patient 1 (F);
# ctr 0.48. img21: nothing affirmed.
QUESTIONS = question_frame([
    {"template_key": "base_2", "image_id": "img12", "object_1": RL, "attribute_1": PE, "answer": ["yes"]},  # 0
    {"template_key": "base_2", "image_id": "img12", "object_1": LL, "attribute_1": PE, "answer": ["no"]},  # 1
    {"template_key": "base_9", "image_id": "img12", "object_1": RL, "category_1": "anatomicalfinding",
     "answer": [PE]},  # 2
    {"template_key": "base_49", "image_id": "img12", "attribute_1": PE, "answer": [RL]},  # 3
    {"template_key": "base_49", "image_id": "img12", "attribute_1": LO, "answer": [LL]},  # 4
    {"template_key": "base_abn_8", "image_id": "img12", "answer": ["yes"]},  # 5: lung opacity, effusion, picc
    {"template_key": "viewpos_2", "image_id": "img12", "answer": ["pa"]},  # 6
    {"template_key": "gender_1", "image_id": "img12", "gender": "F", "answer": ["yes"]},  # 7
    {"template_key": "ct_ratio_1", "image_id": "img12", "answer": ["no"]},  # 8: 0.48 <= 1/2
    {"template_key": "base_2", "image_id": "img21", "object_1": RL, "attribute_1": PE, "answer": ["no"]},  # 9
    {"template_key": "base_abn_8", "image_id": "img21", "answer": ["no"]},  # 10
    {"template_key": "base_40", "image_id": "img21", "category_1": "disease", "answer": []},  # 11
])


def predictions(flip: set[tuple[str, str, str]] = frozenset(), pa_flip: set[str] = frozenset(),
                probs: dict[tuple[str, str, str], float] | None = None) -> Predictions:
    """Predictions equal to the gold labels (prob 1 / 0 for every image x pool pair; p_pa, p_male, ratios from
    the images), except: ``flip`` (image, object, attribute) get 1 - label; ``pa_flip`` images the other view;
    ``probs`` overrides single probabilities."""
    pos = set(POSITIVES.iter_rows())
    rel = []
    for img in IMAGES["image_id"]:
        for o, a, _ in POOL:
            p = float(((img, o, a) in pos) != ((img, o, a) in flip))
            rel.append((img, o, a, (probs or {}).get((img, o, a), p)))
    imgs = [(r["image_id"], float((r["view_position"] == "PA") != (r["image_id"] in pa_flip)),
             float(r["gender"] == "M"), r["ctr"], r["mtr"]) for r in IMAGES.iter_rows(named=True)]
    relations = pl.DataFrame(rel, schema=RELATIONS_SCHEMA, orient="row").sort("image_id", "object", "attribute")
    return Predictions(relations, pl.DataFrame(imgs, schema=IMAGES_SCHEMA, orient="row"))


def build_merged_db(folder: Path) -> Path:
    """See the module docstring; returns the merged database's path."""
    image_db = build_db(folder / "image.db")
    path = build_table_db(folder / "mimic_iv_cxr.db")
    con = sqlite3.connect(path)
    con.execute("ATTACH DATABASE ? AS i", [str(image_db)])
    hadm = "CASE hadm_id WHEN 101 THEN 11 WHEN 102 THEN 12 WHEN 201 THEN 22 END"
    con.execute(f"INSERT INTO tb_cxr SELECT row_id, subject_id, {hadm}, study_id, image_id, viewposition, "
                "studydatetime FROM i.tb_cxr")
    con.execute(f"INSERT INTO tb_cxr_plus SELECT row_id, subject_id, {hadm}, study_id, image_id, viewposition, "
                "studydatetime, studyorder, object, relation, attribute, category, ct_ratio, mt_ratio "
                "FROM i.tb_cxr_plus")
    con.commit()
    con.execute("DETACH DATABASE i")
    con.close()
    return path
