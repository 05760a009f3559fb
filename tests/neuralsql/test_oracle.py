"""The oracle inverts every one of the 48 templates and answers exactly as vqa_programs does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from ehrxqa_pipeline.questions.neuralsql import (ImageRef, OracleModule, OracleQuestionError, QuestionInverter,
                                                 image_path, normalise_answer, resolve_images)
from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import answers
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES, render_question
from tests.neuralsql import AF, DEV, DIS, SID, STUDIES, TA, TL

SAMPLES = [  # two argument sets: plain names, and names with " and " / "/" and every category wording
    dict(object_1="left lung", object_2="right lung", attribute_1="lung opacity", attribute_2="pleural effusion",
         category_1=AF, category_2=DIS, viewpos="AP", gender="F"),
    dict(object_1="cardiac silhouette", object_2="mediastinum", attribute_1="cardiac pacer and wires",
         attribute_2="enlarged cardiac silhouette", category_1=TL, category_2=DEV, viewpos="PA", gender="M"),
    dict(object_1="spine", object_2="left lung", attribute_1="rotated", attribute_2="chest tube",
         category_1=TA, category_2=AF, viewpos="AP", gender="M"),
]


def refs(keys):
    return [ImageRef(STUDIES[k][2], STUDIES[k][3], STUDIES[k][0]) for k in keys]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.key)
def test_every_template_inverts_and_answers_like_vqa_programs(oracle, template):
    images = [k for k in STUDIES if k != "C3" and not (template.content_type == "size" and k == "C2")]
    for sample in SAMPLES:
        args = {c: sample[c] for c in template.columns}
        question = render_question(template, args).lower()
        got_template, got_args = oracle.invert(question)
        assert (got_template.key, got_args) == (template.key, args), question
        frame = pl.DataFrame({"image_id": [STUDIES[k][3] for k in images],
                              **{c: [v] * len(images) for c, v in args.items()}})
        expected = answers(template, frame, oracle.labels).to_list()
        if template.semantic_type == "verify":
            expected = [a == ["yes"] for a in expected]
        assert oracle(refs(images), [question] * len(images)) == expected, question


def test_oracle_answers_by_hand(oracle):
    keys = ["A1", "A2", "B2", "C1"]
    asks = ["is there pneumonia in the left lung?", "list all abnormalities in the right lung.",
            "is this patient female?", "which anatomical location is abnormal, the left lung or the right lung?"]
    assert oracle(refs(keys), asks) == [True, ["atelectasis", "lung opacity"], False, ["left lung", "right lung"]]
    # mixed templates in one batch, then an image absent from the sheet and a missing CTR: abstain
    assert oracle(refs(["C3", "C2"]), ["is there pneumonia?",
                  "is the width of the cardiac silhouette wider than 1/2 of the thorax width?"]) == [None, None]


def test_inversion_is_case_and_space_insensitive(oracle):
    t, args = oracle.invert("  Are there both CARDIAC PACER AND WIRES and   rotated in the spine ")
    assert t.key == "base_5" and args == {"object_1": "spine", "attribute_1": "cardiac pacer and wires",
                                          "attribute_2": "rotated"}


@pytest.mark.parametrize("question, message", [
    ("is there a dragon in the left lung?", "matches none of the 48"),
    ("is the chest x-ray depicting any anatomical findings?", "matches none"),  # a paraphrase, not a template
    ("is there lung opacity in the left kidney?", "matches none"),  # object outside the answer sheet
])
def test_unknown_questions_raise(oracle, question, message):
    with pytest.raises(OracleQuestionError, match=message):
        oracle.invert(question)


def test_ambiguous_vocabulary_raises():
    inverter = QuestionInverter(["left lung"], ["opacity", "opacity and effusion", "effusion and opacity"])
    assert inverter.invert("is there opacity in the left lung?")[0].key == "base_2"
    with pytest.raises(OracleQuestionError, match="ambiguous"):
        inverter.invert("are there both opacity and effusion and opacity in the left lung?")


def test_one_inverter_per_vocabulary_in_a_process(oracle):
    """The label modules of one vocabulary share an inverter (and what it has inverted); another vocabulary,
    or another order of it, gets its own."""
    objects, attributes = ["left lung", "right lung"], ["opacity", "effusion"]
    shared = QuestionInverter.of(objects, attributes)
    assert QuestionInverter.of(tuple(objects), iter(attributes)) is shared
    assert QuestionInverter.of(objects[::-1], attributes) is not shared
    assert QuestionInverter.of(objects, attributes).invert("is there opacity in the left lung?")[0].key == "base_2"
    pairs = oracle.labels.pairs
    assert LabelModule(oracle.labels).inverter is oracle.inverter is QuestionInverter.of(pairs["object"],
                                                                                        pairs["attribute"])


def test_image_refs_and_paths(db_path, tmp_path: Path):
    sub, study, image = STUDIES["B1"][0], STUDIES["B1"][2], STUDIES["B1"][3]
    assert image_path(tmp_path, sub, study, image) == tmp_path / "p10" / "p10000002" / "s50000004" / "img-b1.jpg"
    image_path(tmp_path, sub, study, image).parent.mkdir(parents=True)
    image_path(tmp_path, sub, study, image).write_bytes(b"\xff\xd8")
    con = sqlite3.connect(db_path)
    found = resolve_images(con, [SID["B1"], SID["B2"], 42], tmp_path)
    con.close()
    assert set(found) == {SID["B1"], SID["B2"]} and found[SID["B2"]].path is None
    assert found[SID["B1"]] == ImageRef(study, image, sub, image_path(tmp_path, sub, study, image))


@pytest.mark.parametrize("raw, expected", [(True, True), (None, None), ("Yes", True), (["no"], False),
                                           ("ap", ["ap"]), ([], []), (("b", "A "), ["b", "a"])])
def test_normalise_answer(raw, expected):
    assert normalise_answer(raw) == expected


def test_oracle_from_a_path_checks_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="answer sheet"):
        OracleModule(tmp_path / "missing.db")
