"""Paraphrase robustness (share of phrasing pairs whose answer changed) on a hand-made 2-item case."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.paraphrase.pools import POOL_SCHEMA
from ehrxqa_pipeline.vqa.baselines import PriorQuestionText
from ehrxqa_pipeline.vqa.modules import ReferenceModule
from ehrxqa_pipeline.vqa.robustness import changed_pairs, paraphrase_robustness, phrasings
from tests.vqa.helpers_scoring import IMAGES, PAIRS, predictions, question_frame

RL, PE = "right lung", "pleural effusion"
ITEMS = question_frame([
    {"template_key": "base_2", "image_id": "img12", "object_1": RL, "attribute_1": PE, "answer": ["yes"]},
    {"template_key": "base_abn_8", "image_id": "img21", "answer": ["no"]}])


def _pool(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    return pl.DataFrame([{"dataset": "mimic_cxr_vqa", "template_id": f"mimic_cxr_vqa/{k}", "template_key": k,
                          "text": t, "source": "llm", "cluster": 0, "side": side} for k, t, side in rows],
                        schema=POOL_SCHEMA)


POOLS = _pool([("base_2", "Does the ${object} show ${attribute}?", "test"),
               ("base_2", "Any ${attribute} in the ${object}?", "test"),
               ("base_2", "Train-side ${attribute} in ${object}?", "train"),  # never used for test items
               ("base_abn_8", "Is anything abnormal?", "test"),
               ("base_abn_8", "Are there abnormal findings?", "test")])


class StartsWithIs:
    """Reads the text: "yes" when the question starts with "is"."""

    name = "starts_with_is"

    def __call__(self, images, questions):
        return [q.lower().startswith("is") for q in questions]


def test_phrasings_fill_the_pool_and_the_original():
    p = phrasings(ITEMS, POOLS, k=3, seed=0)
    assert p.filter(pl.col("item") == 0)["question"].sort().to_list() == [
        "Any pleural effusion in the right lung?", "Does the right lung show pleural effusion?",
        "Is there pleural effusion in the right lung?"]
    assert p.filter(pl.col("item") == 1)["question"].sort().to_list() == [
        "Are there abnormal findings?", "Are there any abnormalities?", "Is anything abnormal?"]
    two = phrasings(ITEMS, POOLS, k=2, seed=7)
    assert two.group_by("item").len().sort("item")["len"].to_list() == [2, 2]
    assert two.equals(phrasings(ITEMS, POOLS, k=2, seed=7))  # seeded
    assert phrasings(ITEMS, None, k=3)["question"].to_list() == ["Is there pleural effusion in the right lung?",
                                                                 "Are there any abnormalities?"]


def test_share_of_changed_pairs_by_hand():
    p = phrasings(ITEMS, POOLS, k=3, seed=0)
    # item 0: "is there ...?" yes, "does ...?" no, "any ...?" no -> pairs 3, changed 2 (yes vs each no)
    # item 1: "are there any ...?" no, "is anything abnormal?" yes, "are there abnormal findings?" no -> 2 of 3
    text = PriorQuestionText.fit(question_frame([
        {"template_key": "base_2", "image_id": "a", "object_1": RL, "attribute_1": PE, "answer": a}
        for a in (["yes"], ["yes"], ["no"])] + [{"template_key": "base_abn_8", "image_id": "b", "answer": ["no"]}] * 3,
        "train"))
    # text prior: "is there pleural effusion in the right lung" -> yes (2:1); "are there any abnormalities" -> no;
    # unseen paraphrases -> Prior (Most) = no (4:2). Item 0: yes, no, no -> 2 changed; item 1: no x3 -> 0.
    got = paraphrase_robustness({"starts_with_is": StartsWithIs(), "prior_question_text": text}, p, images=IMAGES)
    assert got["starts_with_is"] == {"items": 2, "pairs": 6, "changed": 4, "share": pytest.approx(4 / 6)}
    assert got["prior_question_text"] == {"items": 2, "pairs": 6, "changed": 2, "share": pytest.approx(2 / 6)}
    assert text.fallbacks == 4


def test_changed_pairs_counts_abstentions_as_an_answer():
    f = pl.DataFrame({"item": [0, 0, 0, 0, 1], "key": ["a", "a", "\x01abstain", "\x01abstain", "a"]})
    # item 0: 4 phrasings -> 6 pairs, same: (a, a) and (abstain, abstain) -> 4 changed; item 1: no pair
    assert changed_pairs(f) == {"items": 1, "pairs": 6, "changed": 4, "share": pytest.approx(4 / 6)}


def test_label_modules_are_refused():
    ref = ReferenceModule(predictions(), PAIRS, IMAGES)
    with pytest.raises(ValueError, match="read the question text"):
        paraphrase_robustness({"reference": ref}, phrasings(ITEMS, POOLS))
