"""Machine validation: each rejection reason, with a planted candidate."""

import polars as pl

from ehrxqa_pipeline.paraphrase.templates import all_templates
from ehrxqa_pipeline.paraphrase.validate import MEANING_THRESHOLD, REASONS, validate, validate_template

BY_ID = {t.template_id: t for t in all_templates()}
BASE_1 = BY_ID["mimic_cxr_vqa/base_1"]  # Are there any ${category} in the ${object}?
BASE_11 = BY_ID["mimic_cxr_vqa/base_11"]  # Which ${category} is related to the ${object}, ${attribute_1} or ...?
LIST_9 = BY_ID["mimic_cxr_vqa/base_9"]  # List all ${category} in the ${object}.

PLANTED = [  # (template, candidate, expected reason)
    (BASE_1, "  ?? ", "empty"),
    (BASE_1, "Are there any ${category} in this lung?", "placeholder_mismatch"),
    (BASE_1, "Are there any ${category} in the ${object} or ${attribute}?", "placeholder_mismatch"),
    (BASE_1, "Are there any ${category} in the ${object?", "placeholder_mismatch"),
    (BASE_1, "Which ${category} can be found in the ${object}?", "semantic_form"),
    (BASE_11, "Is ${attribute_1} the ${category} related to the ${object}, not ${attribute_2}?", "semantic_form"),
    (LIST_9, "Are there ${category} in the ${object}?", "semantic_form"),
    (BASE_1, "ARE there any ${category}  in the ${object} ?", "duplicate"),
    (BASE_1, "Are there any ${category} inside the ${object}?", "near_duplicate"),
    (BASE_1, "Who billed the insurance for ${category} after ${object}?", "semantic_form"),
    (BASE_1, "Was the ${object} bill for ${category} paid by insurance?", "meaning_drift"),
]


def test_each_reason_with_a_planted_candidate(embedder):
    for template, text, reason in PLANTED:
        (v,) = validate_template(template, [(text, "test")], embedder)
        assert v.reason == reason, (text, v.reason, v.detail)
    assert {r for _, _, r in PLANTED} == set(REASONS)


def test_good_candidates_pass_and_duplicates_of_earlier_ones_are_caught(embedder):
    texts = ["Can you see any ${category} in the ${object}?", "Does the ${object} show any ${category}?",
             "Can you see any ${category} in the ${object}?", "Can you see any ${category} within the ${object}?"]
    verdicts = validate_template(BASE_1, [(t, "test") for t in texts], embedder)
    assert [v.reason for v in verdicts] == [None, None, "duplicate", "near_duplicate"]
    assert verdicts[2].detail == "of candidate 0"
    assert all(v.similarity >= MEANING_THRESHOLD for v in verdicts[:2])


def test_validate_frame(embedder):
    cands = pl.DataFrame({"template_id": [BASE_1.template_id] * 2, "rank": [0, 1], "source": ["llm"] * 2,
                          "text": ["Does the ${object} show any ${category}?", "Are there any ${category}?"]})
    out = validate([BASE_1], cands, embedder)
    assert out["valid"].to_list() == [True, False] and out["reason"].to_list() == [None, "placeholder_mismatch"]
