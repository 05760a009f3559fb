"""Every template's program on hand-built labels, answers written out by hand."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import answer_vocabulary, answers, prepare_labels, with_answers
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES, get_template
from tests.questions import pairs_frame

AF, DIS, TA, TL, DEV = "anatomicalfinding", "disease", "technicalassessment", "tubesandlines", "device"
POS = {
    "i1": [("left lung", "pneumonia"), ("left lung", "lung opacity"), ("right lung", "lung opacity"),
           ("right lung", "pleural effusion"), ("mediastinum", "endotracheal tube"), ("spine", "rotated"),
           ("trachea", "endotracheal tube")],
    "i2": [("cardiac silhouette", "enlarged cardiac silhouette"), ("spine", "scoliosis"), ("spine", "rotated"),
           ("cardiac silhouette", "cardiac pacer and wires")],
    "i3": [],
    "i4": [("spine", "rotated")],  # only a technical assessment: not abnormal
}
IMAGES = pl.DataFrame({
    "image_id": ["i1", "i2", "i3", "i4"], "subject_id": [1, 2, 3, 4], "study_id": [11, 12, 13, 14],
    "split": ["train"] * 4, "view_position": ["AP", "PA", "AP", "PA"], "gender": ["F", "M", "M", "F"],
    "image_path": ["p1/a.jpg", "p2/b.jpg", "p3/c.jpg", "p4/d.jpg"],
    "ctr": [0.55, 0.45, None, 0.5], "mtr": [0.30, 0.40, None, 1 / 3]},
    schema_overrides={"subject_id": pl.Int64, "study_id": pl.Int64, "ctr": pl.Float64, "mtr": pl.Float64})
LL, RL, MED, SP, TR, CS = "left lung", "right lung", "mediastinum", "spine", "trachea", "cardiac silhouette"
Y, N = ["yes"], ["no"]

# key -> [(image, {argument column: value}, expected answer)]
CASES = {
    "base_1": [("i1", dict(object_1=LL, category_1=DIS), Y), ("i1", dict(object_1=RL, category_1=DIS), N),
               ("i3", dict(object_1=LL, category_1=AF), N)],
    "base_2": [("i1", dict(object_1=LL, attribute_1="pneumonia"), Y),
               ("i2", dict(object_1=LL, attribute_1="pneumonia"), N)],
    "base_abn_1": [("i1", dict(object_1=SP), N), ("i1", dict(object_1=LL), Y), ("i2", dict(object_1=SP), Y)],
    "base_4": [("i1", dict(object_1=SP, category_1=DIS, category_2=TA), Y),
               ("i1", dict(object_1=SP, category_1=AF, category_2=DIS), N)],
    "base_5": [("i1", dict(object_1=LL, attribute_1="pneumonia", attribute_2="lung opacity"), Y),
               ("i1", dict(object_1=RL, attribute_1="lung opacity", attribute_2="pneumonia"), N)],
    "base_6": [("i1", dict(object_1=RL, attribute_1="lung opacity", attribute_2="pneumonia"), Y),
               ("i1", dict(object_1=RL, attribute_1="pneumonia", attribute_2="atelectasis"), N)],
    "base_9": [("i1", dict(object_1=RL, category_1=AF), ["lung opacity", "pleural effusion"]),
               ("i1", dict(object_1=RL, category_1=DIS), [])],
    "base_abn_2": [("i1", dict(object_1=SP), []), ("i1", dict(object_1=LL), ["lung opacity", "pneumonia"])],
    "base_10": [("i1", dict(object_1=LL, category_1=DIS, category_2=AF), ["lung opacity", "pneumonia"]),
                ("i1", dict(object_1=MED, category_1=TL, category_2=DEV), ["endotracheal tube"])],
    "base_11": [("i1", dict(object_1=LL, category_1=DIS, attribute_1="pneumonia", attribute_2="lung cancer"),
                 ["pneumonia"]),
                ("i1", dict(object_1=RL, category_1=AF, attribute_1="pleural effusion", attribute_2="lung opacity"),
                 ["lung opacity", "pleural effusion"]),
                ("i2", dict(object_1=LL, category_1=AF, attribute_1="atelectasis", attribute_2="pneumothorax"), [])],
    "base_abn_3": [("i1", dict(object_1=SP, object_2=TR), Y), ("i1", dict(object_1=SP, object_2="left clavicle"), N)],
    "base_abn_4": [("i1", dict(object_1=LL, object_2=TR), Y), ("i1", dict(object_1=LL, object_2=SP), N)],
    "base_25": [("i1", dict(category_1=AF, object_1=LL, object_2=RL), ["lung opacity", "pleural effusion"])],
    "base_26": [("i1", dict(category_1=AF, object_1=LL, object_2=RL), ["lung opacity"]),
                ("i1", dict(category_1=DIS, object_1=LL, object_2=RL), [])],
    "base_27": [("i1", dict(category_1=AF, object_1=RL, object_2=LL), ["pleural effusion"]),
                ("i1", dict(category_1=AF, object_1=LL, object_2=RL), [])],
    "base_abn_5": [("i1", dict(object_1=LL, object_2=MED), ["endotracheal tube", "lung opacity", "pneumonia"])],
    "base_abn_6": [("i1", dict(object_1=MED, object_2=TR), ["endotracheal tube"]),
                   ("i1", dict(object_1=LL, object_2=SP), [])],
    "base_abn_7": [("i1", dict(object_1=LL, object_2=RL), ["pneumonia"]), ("i1", dict(object_1=SP, object_2=LL), [])],
    "base_30": [("i1", dict(category_1=DEV), N), ("i2", dict(category_1=DEV), Y)],
    "base_abn_8": [("i1", {}, Y), ("i3", {}, N), ("i4", {}, N)],
    "base_32": [("i4", dict(category_1=DIS, category_2=TA), Y), ("i4", dict(category_1=DIS, category_2=DEV), N)],
    "base_33": [("i1", dict(attribute_1="pleural effusion"), Y), ("i2", dict(attribute_1="pleural effusion"), N)],
    "base_34": [("i1", dict(attribute_1="pneumonia", attribute_2="pleural effusion"), Y),
                ("i1", dict(attribute_1="pneumonia", attribute_2="scoliosis"), N)],
    "base_35": [("i1", dict(attribute_1="scoliosis", attribute_2="pneumonia"), Y),
                ("i3", dict(attribute_1="scoliosis", attribute_2="pneumonia"), N)],
    "base_40": [("i1", dict(category_1=AF), ["lung opacity", "pleural effusion"]), ("i2", dict(category_1=TL), [])],
    "base_41": [("i1", dict(category_1=TL, category_2=DIS), ["endotracheal tube", "pneumonia"])],
    "base_abn_9": [("i1", {}, ["endotracheal tube", "lung opacity", "pleural effusion", "pneumonia"]), ("i4", {}, [])],
    "base_42": [("i1", dict(category_1=AF, attribute_1="scoliosis", attribute_2="lung opacity"), ["lung opacity"]),
                ("i2", dict(category_1=AF, attribute_1="scoliosis", attribute_2="enlarged cardiac silhouette"),
                 ["enlarged cardiac silhouette", "scoliosis"])],
    "base_45": [("i1", dict(object_1=LL, object_2=RL, attribute_1="lung opacity"), Y),
                ("i1", dict(object_1=LL, object_2=RL, attribute_1="pneumonia"), N)],
    "base_46": [("i1", dict(object_1=RL, object_2=LL, attribute_1="pneumonia"), Y),
                ("i1", dict(object_1="left lower lung zone", object_2=RL, attribute_1="pneumonia"), N)],
    "base_49": [("i1", dict(attribute_1="lung opacity"), [LL, RL]),
                ("i1", dict(attribute_1="endotracheal tube"), [MED, TR]), ("i2", dict(attribute_1="pneumonia"), [])],
    "base_50": [("i1", dict(attribute_1="lung opacity", object_1=RL, object_2="left lower lung zone"), [RL]),
                ("i1", dict(attribute_1="lung opacity", object_1=RL, object_2=LL), [LL, RL])],
    "base_abn_10": [("i1", dict(object_1=SP, object_2=TR), [TR]), ("i4", dict(object_1=SP, object_2=MED), [])],
    "base_58": [("i1", dict(attribute_1="pneumonia", attribute_2="endotracheal tube"), [LL, MED, TR])],
    "base_59": [("i1", dict(attribute_1="lung opacity", attribute_2="pleural effusion"), [RL])],
    "base_60": [("i1", dict(attribute_1="lung opacity", attribute_2="pleural effusion"), [LL])],
    "base_64": [("i1", dict(category_1=AF, object_1=LL, object_2=RL), Y),
                ("i1", dict(category_1=DIS, object_1=LL, object_2=RL), N)],
    "base_65": [("i1", dict(category_1=DIS, object_1=RL, object_2=LL), Y),
                ("i1", dict(category_1=DEV, object_1=RL, object_2=LL), N)],
    "base_66": [("i1", dict(category_1=AF), [LL, RL]), ("i1", dict(category_1=TA), [SP])],
    "base_73": [("i1", dict(category_1=DIS, category_2=TL), [LL, MED, TR])],
    "viewpos_1": [("i1", dict(viewpos="AP"), Y), ("i1", dict(viewpos="PA"), N), ("i2", dict(viewpos="PA"), Y)],
    "viewpos_2": [("i1", {}, ["ap"]), ("i2", {}, ["pa"])],
    "viewpos_3": [("i1", {}, ["ap"]), ("i2", {}, ["pa"])],
    "gender_1": [("i1", dict(gender="F"), Y), ("i2", dict(gender="F"), N)],
    "gender_2": [("i1", {}, ["female"]), ("i2", {}, ["male"])],
    "gender_3": [("i1", {}, ["female"]), ("i2", {}, ["male"])],
    "ct_ratio_1": [("i1", {}, Y), ("i2", {}, N), ("i4", {}, N)],  # i4: exactly 1/2 is not wider
    "mt_ratio_1": [("i1", {}, N), ("i2", {}, Y), ("i4", {}, N)],  # i4: exactly 1/3 is not wider
}


@pytest.fixture(scope="module")
def labels():
    positives = pl.DataFrame([(i, o, a) for i, rows in POS.items() for o, a in rows],
                             schema=["image_id", "object", "attribute"], orient="row")
    return prepare_labels(pairs_frame(), positives, IMAGES)


def test_every_template_has_cases():
    assert set(CASES) == {t.key for t in TEMPLATES}


@pytest.mark.parametrize("key", list(CASES))
def test_program(labels, key):
    t = get_template(key)
    cases = CASES[key]
    frame = pl.DataFrame({"image_id": [c[0] for c in cases],
                          **{col: [c[1][col] for c in cases] for col in t.columns}},
                         schema={"image_id": pl.String, **{col: pl.String for col in t.columns}})
    got = answers(t, frame, labels).to_list()
    assert got == [c[2] for c in cases]
    # batch evaluation is row-aligned: the reversed batch gives the reversed answers
    assert answers(t, frame.reverse(), labels).to_list() == got[::-1]


def test_size_needs_a_ratio(labels):
    with pytest.raises(ValueError, match="ctr is missing"):
        answers("ct_ratio_1", pl.DataFrame({"image_id": ["i3"]}), labels)


def test_bad_candidates(labels):
    with pytest.raises(ValueError, match="lacks argument columns"):
        answers("base_2", pl.DataFrame({"image_id": ["i1"], "object_1": [LL]}), labels)
    with pytest.raises(ValueError, match="not in images"):
        answers("base_abn_8", pl.DataFrame({"image_id": ["nope"]}), labels)
    empty = with_answers("base_abn_8", pl.DataFrame(schema={"image_id": pl.String}), labels)
    assert empty.height == 0 and empty.schema["answer"] == pl.List(pl.String)


def test_prepare_labels_sets_aside_unusable_positives():
    positives = pl.DataFrame({"image_id": ["i1", "i1", "zz", "i1"],
                              "object": [LL, SP, LL, LL], "attribute": ["pneumonia", "pneumonia", "pneumonia",
                                                                        "pneumonia"]})
    lab = prepare_labels(pairs_frame(), positives, IMAGES)
    assert lab.positives.select("image_id", "object", "attribute").rows() == [("i1", LL, "pneumonia")]
    assert sorted(lab.rejected_positives["reason"]) == ["(object, attribute) not in the pair pool",
                                                        "image not in images"]
    bad = pl.concat([pairs_frame(), pl.DataFrame({"object": [SP], "attribute": ["pneumonia"], "category": [AF]})])
    with pytest.raises(ValueError, match="more than one category"):
        prepare_labels(bad, positives, IMAGES)


def test_vocabulary_is_derived():
    pairs = pairs_frame()
    vocab = answer_vocabulary(pairs)
    assert vocab == sorted(vocab)
    assert set(vocab) == set(pairs["object"]) | set(pairs["attribute"]) | {
        "yes", "no", "ap", "pa", "f", "m", "female", "male"}


def test_vocabulary_size_on_the_paper_ontology():
    """On the 36 objects x 68 attributes of the paper (here: the synthetic ontology's pool) the vocabulary is
    the published 110 answers plus female/male."""
    from ehrxqa_pipeline.demo import ontology as o

    pool = [(a, b) for a, b in o.closed_possible() if a in o.LABEL_OBJECTS and b not in o.REMOVED_ATTRIBUTES]
    pairs = pl.DataFrame({"object": [a for a, _ in pool], "attribute": [b for _, b in pool],
                          "category": [o.CATEGORY_OF[b] for _, b in pool]})
    assert (pairs["object"].n_unique(), pairs["attribute"].n_unique()) == (36, 68)
    assert len(answer_vocabulary(pairs)) == 112
