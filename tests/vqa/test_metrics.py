"""Metrics on hand-computed examples: exact-set accuracy, micro F1 over answer words, rank AUROC with ties,
per-group AUROC, relative AUROC with its support threshold, execution accuracy."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.vqa.metrics import (accuracy, auroc, auroc_by_group, correct, execution_accuracy, f1_counts,
                                         micro_f1, relative_auroc)

PRED = [["yes"], ["right lung", "left lung"], None, ["pa", "ap"]]
GOLD = [["yes"], ["left lung", "right lung"], ["no"], ["pa"]]


def test_accuracy_is_exact_set_match():
    # item 1: equal; 2: same set in another order; 3: abstention (wrong); 4: a superset (wrong) -> 2/4
    assert correct(PRED, GOLD).to_list() == [True, True, False, False]
    assert accuracy(PRED, GOLD) == 0.5
    assert accuracy([["a", "a"]], [["a"]]) == 1.0  # duplicates do not matter
    assert accuracy([[]], [[]]) == 1.0 and accuracy([], []) is None


def test_micro_f1_sums_words_over_items():
    # TP: yes (1) + left lung, right lung (2) + pa (1) = 4; FP: ap (1); FN: no (1, the abstention) -> 8 / 10
    assert f1_counts(PRED, GOLD) == {"tp": 4, "fp": 1, "fn": 1}
    assert micro_f1(PRED, GOLD) == pytest.approx(8 / 10)
    # all wrong: TP 0 -> 0; nothing to score at all (empty answers only) -> None
    assert micro_f1([["no"]], [["yes"]]) == 0.0
    assert micro_f1([[]], [[]]) is None


def test_micro_f1_three_items():
    pred, gold = [["a", "b"], ["c"], []], [["a"], ["c", "d"], ["e"]]
    # TP a, c = 2; FP b = 1; FN d, e = 2 -> 4 / (4 + 1 + 2)
    assert micro_f1(pred, gold) == pytest.approx(4 / 7)
    assert accuracy(pred, gold) == 0.0


def test_auroc_with_ties_by_hand():
    # positives score 0.4, 0.8; negatives 0.1, 0.4. Pairs (pos, neg): (0.4, 0.1) 1, (0.4, 0.4) tie 1/2,
    # (0.8, 0.1) 1, (0.8, 0.4) 1 -> 3.5 / 4. Ranks: 0.1 -> 1, 0.4 -> 2.5 (tie), 0.8 -> 4; positive rank sum 6.5,
    # U = 6.5 - 2 * 3 / 2 = 3.5.
    assert auroc([0.1, 0.4, 0.4, 0.8], [0, 1, 0, 1]) == pytest.approx(0.875)
    assert auroc([0.5, 0.5, 0.5], [1, 0, 1]) == pytest.approx(0.5)  # all tied
    assert auroc([0.9, 0.1], [0, 1]) == 0.0
    assert auroc([0.1, 0.2], [1, 1]) is None and auroc([0.1], [0]) is None and auroc([], []) is None


def test_auroc_by_group_matches_auroc():
    f = pl.DataFrame({"object": ["x"] * 4 + ["y"] * 3, "attribute": ["a"] * 7,
                      "score": [0.1, 0.4, 0.4, 0.8, 0.3, 0.2, 0.1], "label": [0, 1, 0, 1, 0, 0, 0]})
    g = auroc_by_group(f, ["object", "attribute"])
    assert g.to_dicts() == [{"object": "x", "attribute": "a", "n": 4, "positives": 2, "auroc": 0.875},
                            {"object": "y", "attribute": "a", "n": 3, "positives": 0, "auroc": None}]


def test_relative_auroc_threshold_and_mean():
    vqa = pl.DataFrame({"object": ["o1", "o2", "o3"], "attribute": ["a", "a", "a"], "positives": [10, 12, 9],
                        "auroc": [0.6, 0.9, 0.7]})
    ref = pl.DataFrame({"object": ["o1", "o2", "o3"], "attribute": ["a", "a", "a"], "auroc": [0.8, 0.9, 0.7]})
    r = relative_auroc(vqa, ref, min_positives=10)  # o3 has 9 positives: out
    assert r["n_pairs"] == 2 and r["pairs"]["auroc_rel"].to_list() == pytest.approx([0.75, 1.0])
    assert r["mean"] == pytest.approx(0.875)
    assert relative_auroc(vqa, ref, min_positives=9)["n_pairs"] == 3
    none = relative_auroc(vqa, ref, min_positives=13)
    assert none["n_pairs"] == 0 and none["mean"] is None
    with pytest.raises(ValueError):
        relative_auroc(vqa, ref, min_positives=0)


def test_execution_accuracy_counts_abstentions_and_errors_as_wrong():
    r = execution_accuracy(["correct", "correct", "abstain", "error", "wrong"])
    assert r == {"n": 5, "correct": 2, "accuracy": 0.4, "abstentions": 1, "errors": 1}
    assert execution_accuracy([])["accuracy"] is None
    with pytest.raises(ValueError, match="unknown outcomes"):
        execution_accuracy(["maybe"])
