"""Scoring metrics of the EHRXQA paper (Table 4: Acc, F1 micro; E.1.3: AUROC and relative AUROC; Table 5:
execution accuracy), in plain polars / numpy so each value can be checked by hand.

Grain and semantics:
- ``accuracy`` / ``micro_f1``: one predicted and one gold answer per item; an answer is a list of strings
  (``["yes"]``, ``["left lung", "right lung"]``, ``[]``) read as a *set* (order and duplicates ignored);
  ``None`` is an abstention: never correct, and an empty prediction for F1. Accuracy is exact set match.
  Micro F1 is the multi-label F1 over answer words: TP = |pred & gold|, FP = |pred - gold|,
  FN = |gold - pred| summed over items, F1 = 2 TP / (2 TP + FP + FN).
- ``auroc``: rank-based (Mann-Whitney U) area under the ROC curve, tied scores get the average rank
  (a tie between a positive and a negative counts one half); None when one class is absent.
- ``auroc_by_group``: the same per group (e.g. per (object, attribute)) in one polars pass.
- ``relative_auroc``: m_rel(o, a) = AUROC_VQA(o, a) / AUROC_ref(o, a) over the pairs with at least
  ``min_positives`` positives (the paper: 10) where both AUROCs exist, and their mean.
- ``execution_accuracy``: one outcome per EHRXQA item (``correct``, ``wrong``, ``abstain``, ``error``);
  abstentions and errors count as wrong and are reported apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import polars as pl

OUTCOMES = ("correct", "wrong", "abstain", "error")
_LIST = pl.List(pl.String)


def _answer_frame(pred: Sequence | pl.Series, gold: Sequence | pl.Series) -> pl.DataFrame:
    """pred / gold as deduplicated, sorted list columns (pred null = abstention)."""
    p = pred if isinstance(pred, pl.Series) else pl.Series(list(pred), dtype=_LIST)
    g = gold if isinstance(gold, pl.Series) else pl.Series(list(gold), dtype=_LIST)
    if p.len() != g.len():
        raise ValueError(f"{p.len()} predicted answers for {g.len()} gold answers")
    f = pl.DataFrame({"pred": p.cast(_LIST), "gold": g.cast(_LIST)})
    if f["gold"].null_count():
        raise ValueError("gold answers contain None; every gold answer is a list of strings")
    return f.with_columns(abstain=pl.col("pred").is_null(), pred=pl.col("pred").fill_null(pl.lit([], dtype=_LIST)))


def _set(col: str) -> pl.Expr:
    return pl.col(col).list.unique().list.sort()


def correct(pred: Sequence | pl.Series, gold: Sequence | pl.Series) -> pl.Series:
    """Per item: the predicted answer equals the gold answer as a set (False for an abstention)."""
    f = _answer_frame(pred, gold)
    return f.select((~pl.col("abstain") & (_set("pred") == _set("gold"))).alias("correct")).to_series()


def accuracy(pred: Sequence | pl.Series, gold: Sequence | pl.Series) -> float | None:
    """Share of items whose predicted answer set equals the gold set; None for no items."""
    c = correct(pred, gold)
    return None if c.len() == 0 else float(c.mean())


def f1_counts(pred: Sequence | pl.Series, gold: Sequence | pl.Series) -> dict[str, int]:
    """{"tp", "fp", "fn"} summed over items (answers as sets of words)."""
    f = _answer_frame(pred, gold).select(p=_set("pred"), g=_set("gold"))
    c = f.select(tp=pl.col("p").list.set_intersection("g").list.len().sum(),
                 fp=pl.col("p").list.set_difference("g").list.len().sum(),
                 fn=pl.col("g").list.set_difference("p").list.len().sum())
    return {k: int(c[k][0] or 0) for k in ("tp", "fp", "fn")}


def micro_f1(pred: Sequence | pl.Series, gold: Sequence | pl.Series) -> float | None:
    """2 TP / (2 TP + FP + FN) over all items; None when there is no word at all (nothing to score)."""
    c = f1_counts(pred, gold)
    denom = 2 * c["tp"] + c["fp"] + c["fn"]
    return None if denom == 0 else 2 * c["tp"] / denom


def auroc(scores: Sequence[float] | np.ndarray, labels: Sequence[int | bool] | np.ndarray) -> float | None:
    """Rank-based AUROC with ties averaged; None when all labels are equal (or there are none)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores for {y.size} labels")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = pl.Series(s).rank("average").to_numpy()
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auroc_by_group(frame: pl.DataFrame, by: Sequence[str], score: str = "score", label: str = "label") -> pl.DataFrame:
    """One row per group: ``by`` columns, ``n``, ``positives`` (the support) and ``auroc`` (null where one
    class is absent); sorted by ``by``. ``label`` is 0/1 or bool."""
    by = list(by)
    f = frame.select(*by, pl.col(score).cast(pl.Float64).alias("_s"), pl.col(label).cast(pl.Boolean).alias("_y"))
    g = (f.with_columns(_r=pl.col("_s").rank("average").over(by))
         .group_by(by).agg(n=pl.len(), positives=pl.col("_y").sum().cast(pl.Int64),
                           _rsum=pl.col("_r").filter(pl.col("_y")).sum()))
    n_pos, n_neg = pl.col("positives").cast(pl.Float64), (pl.col("n") - pl.col("positives")).cast(pl.Float64)
    value = (pl.col("_rsum") - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return (g.with_columns(auroc=pl.when((n_pos > 0) & (n_neg > 0)).then(value))
            .select(*by, pl.col("n").cast(pl.Int64), "positives", "auroc").sort(by))


def relative_auroc(vqa: pl.DataFrame, ref: pl.DataFrame, min_positives: int = 10) -> dict:
    """m_rel per (object, attribute): ``vqa`` and ``ref`` have object, attribute, auroc; the support
    (``positives``) is taken from ``vqa`` (the items the VQA module was scored on). Pairs enter when
    positives >= ``min_positives`` and both AUROCs exist (a reference AUROC of 0 cannot divide: left out).
    Returns {"pairs": frame(object, attribute, positives, auroc_vqa, auroc_ref, auroc_rel), "n_pairs", "mean"}."""
    if min_positives < 1:
        raise ValueError("min_positives must be >= 1")
    keys = ["object", "attribute"]
    j = (vqa.select(*keys, "positives", pl.col("auroc").alias("auroc_vqa"))
         .join(ref.select(*keys, pl.col("auroc").alias("auroc_ref")), on=keys, how="inner")
         .filter((pl.col("positives") >= min_positives) & pl.col("auroc_vqa").is_not_null()
                 & pl.col("auroc_ref").is_not_null() & (pl.col("auroc_ref") > 0))
         .with_columns(auroc_rel=pl.col("auroc_vqa") / pl.col("auroc_ref")).sort(keys))
    return {"pairs": j, "n_pairs": j.height, "mean": None if j.height == 0 else float(j["auroc_rel"].mean())}


def execution_accuracy(outcomes: Iterable[str]) -> dict:
    """{"n", "correct", "accuracy" (None for no items), "abstentions", "errors"} from item outcomes."""
    counts = Counter(outcomes)
    unknown = set(counts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown outcomes {sorted(unknown)}; expected {OUTCOMES}")
    n = sum(counts.values())
    return {"n": n, "correct": counts["correct"], "accuracy": None if n == 0 else counts["correct"] / n,
            "abstentions": counts["abstain"], "errors": counts["error"]}
