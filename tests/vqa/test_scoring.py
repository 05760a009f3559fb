"""MIMIC-CXR-VQA scores of the constant "yes" module (hand-computed), verify AUROC and relative AUROC on a
hand example, EHRXQA execution accuracy on a small real database (oracle 100%, "yes" equal to an independent
count, abstaining and contract-breaking modules counted), and the leaderboard / scores.json."""

from __future__ import annotations

import json
import re
import sqlite3

import polars as pl
import pytest

from ehrxqa_pipeline.questions.ehrxqa import CATALOG, fill_items, run_sql
from ehrxqa_pipeline.questions.ehrxqa.records import stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import Sample, SampledItem
from ehrxqa_pipeline.questions.ehrxqa.stats import scope_axes
from ehrxqa_pipeline.questions.neuralsql import OracleModule, YesModule, parse_neuralsql, same_answer
from ehrxqa_pipeline.vqa.baselines import PriorQuestion
from ehrxqa_pipeline.vqa.leaderboard import leaderboard_markdown, module_scores, scores_json
from ehrxqa_pipeline.vqa.modules import answer_mimic_cxr_vqa
from ehrxqa_pipeline.vqa.scoring import score_ehrxqa, score_mimic_cxr_vqa, verify_auroc, verify_items
from tests.vqa.helpers_scoring import (IMAGES, PAIRS, POSITIVES, QUESTIONS, build_merged_db, predictions,
                                      question_frame)


def test_yes_module_on_mimic_cxr_vqa_by_hand():
    pred = answer_mimic_cxr_vqa(YesModule(), QUESTIONS, images=IMAGES)
    assert pred == [["yes"]] * 12
    s = score_mimic_cxr_vqa(QUESTIONS, pred)
    # gold is exactly ["yes"] for rows 0, 5, 7 -> 3 / 12. Micro F1: TP 3, FP 9 (every other "yes"),
    # FN 8 (the gold words of rows 1, 2, 3, 4, 6, 8, 9, 10; row 11 is []) -> 6 / (6 + 9 + 8)
    assert s["n"] == 12 and s["accuracy"] == pytest.approx(3 / 12) and s["micro_f1"] == pytest.approx(6 / 23)
    acc = {k: (v["n"], v["accuracy"]) for k, v in s["by_content_type"].items()}
    assert acc == {"presence": (3, pytest.approx(1 / 3)), "anatomy": (2, 0.0), "attribute": (2, 0.0),
                   "abnormality": (2, 0.5), "size": (1, 0.0), "plane": (1, 0.0), "gender": (1, 1.0)}
    sem = {k: (v["n"], v["accuracy"]) for k, v in s["by_semantic_type"].items()}
    assert sem == {"verify": (7, pytest.approx(3 / 7)), "choose": (1, 0.0), "query": (4, 0.0)}
    assert s["abstentions"] == 0
    with pytest.raises(ValueError, match="12 questions"):
        score_mimic_cxr_vqa(QUESTIONS, pred[:3])


# (left lung, lung opacity) is affirmed on img11, img12, img22 and not on img13, img21, img31
LLO = ("left lung", "lung opacity")
REF_PROBS = {"img11": 0.9, "img12": 0.4, "img22": 0.7, "img13": 0.4, "img21": 0.2, "img31": 0.1}
MODULE_YES = {"img11", "img22", "img13"}
VERIFY = question_frame([{"template_key": "base_2", "image_id": i, "object_1": LLO[0], "attribute_1": LLO[1],
                          "answer": ["yes" if i in ("img11", "img12", "img22") else "no"]} for i in REF_PROBS])


def test_verify_auroc_and_relative_by_hand():
    preds = predictions(probs={(i, *LLO): p for i, p in REF_PROBS.items()})
    answers = [["yes"] if i in MODULE_YES else ["no"] for i in REF_PROBS]
    r = verify_auroc(VERIFY, preds, POSITIVES, min_positives=3, module_answers=answers)
    # reference: positives .9 .4 .7, negatives .4 .2 .1 -> .9: 3, .7: 3, .4: 1/2 + 1 + 1 -> 8.5 / 9
    row = r["reference"].filter((pl.col("object") == LLO[0]) & (pl.col("attribute") == LLO[1])).row(0, named=True)
    assert (row["n"], row["positives"], row["auroc"]) == (6, 3, pytest.approx(8.5 / 9))
    assert r["reference_pairs"] == 1 and r["reference_mean"] == pytest.approx(8.5 / 9)  # other pairs < 3 positives
    assert r["verify_items"] == 6 and r["reference_on_items"]["auroc"].to_list() == [pytest.approx(8.5 / 9)]
    # module: positives 1 0 1, negatives 1 0 0 -> each "yes" positive: 1/2 + 1 + 1; the "no" one: 0 + 1/2 + 1/2
    # -> 6 / 9; relative = (6 / 9) / (8.5 / 9) = 12 / 17
    assert r["module"]["auroc"].to_list() == [pytest.approx(6 / 9)]
    assert r["relative"]["n_pairs"] == 1 and r["relative"]["mean"] == pytest.approx(12 / 17)
    none = verify_auroc(VERIFY, preds, POSITIVES, min_positives=4, module_answers=answers)
    assert none["relative"]["n_pairs"] == 0 and none["relative"]["mean"] is None and none["reference_mean"] is None


def test_verify_auroc_scores_a_missing_prediction_as_zero():
    preds = predictions(probs={(i, *LLO): p for i, p in REF_PROBS.items()})
    preds = type(preds)(preds.relations.filter(~((pl.col("image_id") == "img22") & (pl.col("object") == LLO[0])
                                                 & (pl.col("attribute") == LLO[1]))), preds.images)
    r = verify_auroc(VERIFY, preds, POSITIVES, min_positives=3)
    # img22's positive now scores 0: .9 -> 3, .4 -> 2.5, 0 -> 0 = 5.5 / 9, on the images and on the items
    row = r["reference"].filter((pl.col("object") == LLO[0]) & (pl.col("attribute") == LLO[1])).row(0, named=True)
    assert row["positives"] == 3 and row["auroc"] == pytest.approx(5.5 / 9)
    assert r["reference_on_items"]["auroc"].to_list() == [pytest.approx(5.5 / 9)] and r["relative"] is None


def test_verify_items_decompose_the_test_images():
    v = verify_items(predictions(), POSITIVES, ["img12", "img21"])
    assert v.height == 20 and set(v["template_key"]) == {"base_2"}
    assert v.filter(pl.col("answer") == ["yes"])["image_id"].to_list() == ["img12"] * 3


# -- EHRXQA ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gold_db(tmp_path_factory):
    return build_merged_db(tmp_path_factory.mktemp("vqa_scoring"))


@pytest.fixture(scope="module")
def items(gold_db):
    conn = sqlite3.connect(gold_db)
    try:
        return fill_items(conn, 0, CATALOG[::3])
    finally:
        conn.close()


_VQA_CALL = re.compile(r'func_vqa\("[^"]*",\s*[\w.]+\)')


def _yes_outcomes(conn, items) -> list[bool]:
    """Independently of the executor: every FUNC_VQA(...) replaced by 1 (what "yes" answers), plain SQLite."""
    out = []
    for i in items:
        assert len(_VQA_CALL.findall(i.neural_sql)) == i.neural_sql.count("func_vqa")
        ordered = parse_neuralsql(i.neural_sql).ordered
        out.append(same_answer(run_sql(conn, _VQA_CALL.sub("1", i.neural_sql)), i.answer, ordered=ordered))
    return out


def test_oracle_scores_100_percent_in_every_cell(gold_db, items):
    s = score_ehrxqa(gold_db, None, items, OracleModule(gold_db))
    assert s["n"] == len(items) >= 130 and s["accuracy"] == 1.0 and s["errors"] == 0 and s["abstentions"] == 0
    assert set(s["by_modality"]) == {"image", "table", "image+table"}
    assert {"image/single", "image/group", "table/none", "table/single", "table/group", "image+table/single",
            "image+table/group"} == set(s["by_modality_scope"])
    assert all(v["accuracy"] == 1.0 for v in s["by_modality_scope"].values())
    assert s["vqa_asked"] > 0 and s["vqa_abstentions"] == 0


def test_yes_module_matches_an_independent_count(gold_db, items):
    conn = sqlite3.connect(gold_db)
    expected = _yes_outcomes(conn, items)
    conn.close()
    s = score_ehrxqa(gold_db, None, items, YesModule())
    assert s["correct"] == sum(expected) and 0 < s["correct"] < len(items)
    table = [e for e, i in zip(expected, items) if scope_axes(i.template.scope)["modality"] == "table"]
    assert all(table) and s["by_modality"]["table"]["accuracy"] == 1.0  # no VQA needed
    for m in ("image", "image+table"):
        want = [e for e, i in zip(expected, items) if scope_axes(i.template.scope)["modality"] == m]
        assert s["by_modality"][m]["correct"] == sum(want) and s["by_modality"][m]["n"] == len(want)
    # the same items as stored rows (JSON answers, scope column) score the same
    rows = stored_frame(Sample(items=[SampledItem.of(i, "test", "gold", 0) for i in items]))
    assert score_ehrxqa(gold_db, None, rows, YesModule())["correct"] == s["correct"]


class _Abstain:
    name = "abstain"

    def __call__(self, images, questions):
        return [None] * len(questions)


class _Broken:
    name = "broken"

    def __call__(self, images, questions):
        return [5] * len(questions)


def test_abstentions_and_errors_are_counted(gold_db, items):
    s = score_ehrxqa(gold_db, None, items, _Abstain())
    assert s["vqa_asked"] > 0 and s["vqa_abstentions"] == s["vqa_asked"]
    assert s["abstentions"] > 0 and s["by_modality"]["table"]["accuracy"] == 1.0
    assert s["by_modality"]["image"]["accuracy"] < 1.0
    b = score_ehrxqa(gold_db, None, items, _Broken())
    assert b["errors"] > 0 and "broken" in b["error_examples"][0] and b["by_modality"]["table"]["errors"] == 0


def test_prior_question_runs_as_a_module(gold_db, items):
    fit = question_frame([{"template_key": "base_2", "image_id": "x", "object_1": "left lung",
                           "attribute_1": "lung opacity", "answer": ["yes"]}], "train")
    prior = PriorQuestion.fit(fit, pairs=PAIRS)
    s = score_ehrxqa(gold_db, None, items, prior)
    assert s["errors"] == 0 and s["n"] == len(items) and prior.fallbacks > 0  # only base_2 is known


# -- leaderboard ------------------------------------------------------------------------------------
def test_leaderboard_and_scores_json():
    yes = score_mimic_cxr_vqa(QUESTIONS, [["yes"]] * 12)
    ehr = {"n": 10, "correct": 7, "accuracy": 0.7, "abstentions": 1, "errors": 0,
           "by_modality_scope": {"image/single": {"accuracy": 2 / 3}, "table/none": {"accuracy": 1.0}}}
    scores = {"yes": module_scores(mimic=yes, ehrxqa=ehr),
              "prior_question_text": module_scores(robustness={"items": 2, "pairs": 6, "changed": 2, "share": 1 / 3})}
    md = leaderboard_markdown(scores)
    lines = md.splitlines()
    assert lines[0].startswith("| module | Acc | F1 (micro) | Acc presence |") and "Paraphrase changed" in lines[0]
    assert lines[2].startswith("| yes | 0.250 | 0.261 | 0.333 |") and "| 0.667 |" in lines[2]
    assert lines[3].startswith("| prior_question_text | – |") and lines[3].endswith("| 0.333 |")
    text = scores_json(scores)
    data = json.loads(text)
    assert list(data) == ["prior_question_text", "yes"] and data["yes"]["mimic_cxr_vqa/micro_f1"] == 0.2609
    assert data["yes"]["ehrxqa/accuracy/image/single"] == 0.6667
    assert data["prior_question_text"]["robustness/pairs"] == 6
    assert scores_json(scores) == text and text.endswith("}\n")
    assert json.loads(scores_json({"m": {"x": float("nan")}})) == {"m": {"x": None}}
