"""The 48 MIMIC-CXR-VQA templates as data."""

from __future__ import annotations

from collections import Counter

import pytest

from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import (
    ARGUMENT_COLUMNS, SLOT_COLUMNS, TEMPLATE_BY_KEY, TEMPLATES, get_template, render_question)

KEYS = ("base_1 base_2 base_abn_1 base_4 base_5 base_6 base_9 base_abn_2 base_10 base_11 base_abn_3 base_abn_4 "
        "base_25 base_26 base_27 base_abn_5 base_abn_6 base_abn_7 base_30 base_abn_8 base_32 base_33 base_34 "
        "base_35 base_40 base_41 base_abn_9 base_42 base_45 base_46 base_49 base_50 base_abn_10 base_58 base_59 "
        "base_60 base_64 base_65 base_66 base_73 viewpos_1 viewpos_2 viewpos_3 gender_1 gender_2 gender_3 "
        "ct_ratio_1 mt_ratio_1").split()


def test_fixed_order_keys_and_programs():
    assert [t.key for t in TEMPLATES] == KEYS
    assert [t.index for t in TEMPLATES] == list(range(1, 49))
    assert [t.program for t in TEMPLATES] == [f"program_{i}" for i in range(1, 49)]
    assert TEMPLATE_BY_KEY["base_abn_10"].index == 33


def test_paper_wording_and_types():
    t = get_template("base_2")
    assert (t.text, t.content_type, t.semantic_type) == (
        "Is there ${attribute} in the ${object}?", "presence", "verify")
    assert get_template("base_11").text == \
        "Which ${category} is related to the ${object}, ${attribute_1} or ${attribute_2}?"
    assert get_template("mt_ratio_1").text == \
        "Is the width of the upper mediastinum wider than 1/3 of the thorax width?"
    assert get_template("base_50").semantic_type == "choose" and get_template("base_50").content_type == "anatomy"
    with pytest.raises(KeyError, match="base_99"):
        get_template("base_99")


def test_content_and_semantic_type_counts_match_paper_table():
    assert Counter(t.content_type for t in TEMPLATES) == {
        "presence": 14, "anatomy": 7, "attribute": 9, "abnormality": 10, "size": 2, "plane": 3, "gender": 3}
    assert Counter(t.semantic_type for t in TEMPLATES) == {"verify": 22, "choose": 6, "query": 20}
    # verify templates are yes/no; no anatomy template verifies (paper B.2.2)
    assert all(t.text.startswith(("Is", "Are")) for t in TEMPLATES if t.semantic_type == "verify")
    assert not [t for t in TEMPLATES if t.content_type == "anatomy" and t.semantic_type == "verify"]
    assert all(" or " in t.text for t in TEMPLATES if t.semantic_type == "choose")  # two options offered


def test_slots_map_to_argument_columns():
    for t in TEMPLATES:
        assert set(t.columns) <= set(ARGUMENT_COLUMNS)
        assert len(t.columns) == len(set(t.slots)), t.key
    assert get_template("base_45").columns == ("object_1", "object_2", "attribute_1")
    assert get_template("base_abn_8").columns == ()
    assert SLOT_COLUMNS["object"] == "object_1"


def test_render_question():
    assert render_question("base_2", {"object_1": "left lung", "attribute_1": "pneumonia"}) == \
        "Is there pneumonia in the left lung?"
    assert render_question("base_4", {"object_1": "left lung", "category_1": "tubesandlines",
                                      "category_2": "anatomicalfinding"}) == \
        "Are there any tubes/lines or anatomical findings in the left lung?"
    assert render_question("base_42", {"category_1": "disease", "attribute_1": "pneumonia",
                                       "attribute_2": "lung cancer"}) == \
        "Which disease is related, pneumonia or lung cancer?"
    assert render_question("gender_1", {"gender": "M"}) == "Is this patient male?"
    assert render_question("viewpos_1", {"viewpos": "PA"}) == "Is this an PA view?"
    assert render_question("base_abn_9", {}) == "List all abnormalities."
