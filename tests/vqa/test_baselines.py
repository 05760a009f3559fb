"""Prior (Most), Prior (Question) and the text-keyed prior, fitted on hand-made frames (expected answers
written out), on MIMIC-CXR-VQA rows in batch and as VqaModules for EHRXQA questions."""

from __future__ import annotations

import json

import polars as pl
import pytest

from ehrxqa_pipeline.vqa.baselines import (PriorMost, PriorQuestion, PriorQuestionText, fit_priors, most_popular,
                                           priors_of_state, priors_state, question_texts)
from tests.vqa.helpers_scoring import question_frame

LL, RL, PE, LO = "left lung", "right lung", "pleural effusion", "lung opacity"


def _fit_frame() -> pl.DataFrame:
    return pl.concat([
        question_frame([
            {"template_key": "base_2", "image_id": "i1", "object_1": LL, "attribute_1": PE, "answer": ["yes"]},
            {"template_key": "base_2", "image_id": "i2", "object_1": RL, "attribute_1": PE, "answer": ["no"]},
            {"template_key": "base_9", "image_id": "i1", "object_1": LL, "category_1": "anatomicalfinding",
             "answer": [LO]},
            {"template_key": "base_9", "image_id": "i2", "object_1": LL, "category_1": "anatomicalfinding",
             "answer": [LO]},
            {"template_key": "viewpos_2", "image_id": "i1", "answer": ["ap"]},
            {"template_key": "viewpos_2", "image_id": "i2", "answer": ["pa"]}], "train"),
        question_frame([
            {"template_key": "base_2", "image_id": "i3", "object_1": RL, "attribute_1": LO, "answer": ["no"]},
            {"template_key": "base_9", "image_id": "i3", "object_1": RL, "category_1": "anatomicalfinding",
             "answer": []}], "valid"),
        question_frame([{"template_key": "base_2", "image_id": f"t{i}", "object_1": LL, "attribute_1": PE,
                         "answer": ["yes"]} for i in range(5)], "test"),  # never fitted on
    ])


def test_prior_most_and_tie_break():
    # train+valid answers: ["no"] x2, ["lung opacity"] x2, ["yes"], [], ["ap"], ["pa"]: a tie at 2 between
    # ["lung opacity"] and ["no"], broken by the smaller answer: "lung opacity" < "no". (The 5 test "yes"
    # rows would win if they were counted.)
    prior = PriorMost.fit(_fit_frame())
    assert prior.answer == [LO]
    assert prior.answer_frame(_fit_frame().head(3)) == [[LO]] * 3
    assert prior([None, None], ["is there x?", "anything"]) == [[LO], [LO]]
    yes = PriorMost.fit(question_frame([{"template_key": "base_2", "image_id": "a", "object_1": LL,
                                         "attribute_1": PE, "answer": a} for a in (["yes"], ["yes"], ["no"])], "train"))
    assert yes.answer == ["yes"] and yes([None], ["anything"]) == [True]  # verify form for the executor


def test_the_priors_fitted_together_are_those_fitted_alone():
    pairs = pl.DataFrame({"object": [LL, RL], "attribute": [PE, LO]})
    together = fit_priors(_fit_frame(), pairs)
    assert set(together) == {"prior_most", "prior_question", "prior_question_text"}
    alone = PriorMost.fit(_fit_frame()), PriorQuestion.fit(_fit_frame(), pairs), PriorQuestionText.fit(_fit_frame())
    assert together["prior_most"].answer == alone[0].answer == [LO]
    assert together["prior_question"].by_template == alone[1].by_template
    assert together["prior_question"].most.answer == alone[1].most.answer
    assert together["prior_question"].inverter.invert("is there lung opacity in the right lung?") == \
        alone[1].inverter.invert("is there lung opacity in the right lung?")
    assert together["prior_question_text"].by_text == alone[2].by_text and len(alone[2].by_text) == 6  # 8 rows, 6 texts


def test_the_priors_read_back_from_their_state_answer_as_fitted():
    """``priors_of_state`` of the JSON of ``priors_state`` (what the scores keep between builds): the same
    vocabulary and tables, and the same answers, to MIMIC-CXR-VQA rows and to EHRXQA's question texts."""
    pairs = pl.DataFrame({"object": [LL, RL], "attribute": [PE, LO]})
    fitted = fit_priors(_fit_frame(), pairs)
    back = priors_of_state(json.loads(json.dumps(priors_state(fitted))))
    assert back["prior_question"].objects == [LL, RL] and back["prior_question"].attributes == [LO, PE]
    texts = ["is there lung opacity in the right lung?", "is there pleural effusion in the left lung?", "what?"]
    for name, module in fitted.items():
        assert back[name].answer_frame(_fit_frame()) == module.answer_frame(_fit_frame())
        assert back[name]([None] * len(texts), texts) == module([None] * len(texts), texts)
    assert vars(back["prior_question"]).keys() == vars(fitted["prior_question"]).keys()


def test_most_popular_orders_lists_elementwise():
    f = pl.DataFrame({"g": ["x"] * 4, "answer": [["a", "b"], ["a"], ["a", "b"], ["a"]]},
                     schema={"g": pl.String, "answer": pl.List(pl.String)})
    assert most_popular(f, ["g"])["answer"].to_list() == [["a"]]  # tie 2:2, ["a"] < ["a", "b"]


def test_prior_question_per_template_with_fallback():
    prior = PriorQuestion.fit(_fit_frame())
    # base_2: no x2 vs yes x1; base_9: lung opacity x2 vs [] x1; viewpos_2: ap / pa tie -> ap
    assert prior.by_template == {"base_2": ["no"], "base_9": [LO], "viewpos_2": ["ap"]}
    test = question_frame([
        {"template_key": "base_2", "image_id": "x", "object_1": RL, "attribute_1": PE, "answer": ["yes"]},
        {"template_key": "viewpos_2", "image_id": "x", "answer": ["pa"]},
        {"template_key": "gender_1", "image_id": "x", "gender": "F", "answer": ["yes"]}])  # unseen template
    assert prior.answer_frame(test) == [["no"], ["ap"], [LO]]
    assert prior.fallbacks == 1


def test_prior_question_as_a_vqa_module():
    prior = PriorQuestion.fit(_fit_frame())
    got = prior([None] * 4, ["is there pleural effusion in the left lung?",  # base_2 -> verify form False
                             "list all anatomical findings in the right lung.",  # base_9
                             "which view is in this image, ap or pa?",  # viewpos_2
                             "how is the weather?"])  # no template: Prior (Most)
    assert got == [False, [LO], ["ap"], [LO]]
    assert prior.fallbacks == 1


def test_prior_question_text_keys_on_the_normalised_text():
    fit = _fit_frame()
    prior = PriorQuestionText.fit(fit)
    texts = question_texts(fit.head(2)).to_list()
    assert texts == ["Is there pleural effusion in the left lung?", "Is there pleural effusion in the right lung?"]
    # each base_2 text occurs once in train+valid; case, spacing and the final "?" do not matter
    assert prior.answer_texts(["is there  pleural effusion in the LEFT lung", "Is there pleural effusion in the "
                               "right lung?", "Does the left lung show pleural effusion?"]) == [["yes"], ["no"], [LO]]
    assert prior.fallbacks == 1
    assert prior([None], ["Is there pleural effusion in the left lung?"]) == [True]


def test_question_texts_fill_a_paraphrase_column():
    f = question_frame([{"template_key": "base_2", "image_id": "x", "object_1": LL, "attribute_1": PE,
                         "answer": ["no"]}]).with_columns(paraphrase=pl.lit("Does the ${object} show ${attribute}?"))
    assert question_texts(f).to_list() == ["Does the left lung show pleural effusion?"]


def test_fit_needs_train_or_valid_rows():
    with pytest.raises(ValueError, match="no train/valid rows"):
        PriorMost.fit(_fit_frame().filter(pl.col("split") == "test"))
