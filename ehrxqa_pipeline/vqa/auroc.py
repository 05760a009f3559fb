"""Rank-based AUROC (Mann-Whitney U with average ranks for ties), per array and per (object, attribute) pair.

Grain: ``auroc`` -> one number for one (labels, scores) vector; ``pair_auroc`` -> one row per
(object, attribute) pair with at least ``min_positives`` positives and one negative.
Source: model scores (``Predictions.relations.prob`` or training logits) joined with 0/1 labels.
Used for model selection during training and for the reference model's report; scikit-learn is not a
dependency, so this is the usual closed form: AUROC = (R_pos - P (P + 1) / 2) / (P N), R_pos the sum of
the positives' average ranks.
"""

from __future__ import annotations

import numpy as np
import polars as pl


def _average_ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.r_[0, np.flatnonzero(xs[1:] != xs[:-1]) + 1]
    ends = np.r_[starts[1:], len(xs)]
    avg = (starts + ends + 1) / 2.0  # 1-based average rank of each tie block
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def auroc(y: np.ndarray, score: np.ndarray) -> float:
    """AUROC of ``score`` for binary ``y``; NaN when y has only one class."""
    y = np.asarray(y).astype(bool)
    score = np.asarray(score, np.float64)
    p = int(y.sum())
    n = len(y) - p
    if p == 0 or n == 0:
        return float("nan")
    r = _average_ranks(score)
    return float((r[y].sum() - p * (p + 1) / 2) / (p * n))


def pair_auroc(frame: pl.DataFrame, min_positives: int = 3, label: str = "label", score: str = "prob",
               by: tuple[str, ...] = ("object", "attribute")) -> pl.DataFrame:
    """Per-pair AUROC of ``score`` vs ``label`` (0/1) over the rows of ``frame`` (one row per image x pair).

    Returns object, attribute, positives, negatives, auroc for pairs with >= ``min_positives`` positives
    and >= 1 negative, sorted by the pair.
    """
    keys = list(by)
    lab = pl.col(label).cast(pl.Int64)
    return (frame.with_columns(pl.col(score).cast(pl.Float64).rank("average").over(keys).alias("_r"))
            .group_by(keys)
            .agg(lab.sum().alias("positives"), (1 - lab).sum().alias("negatives"),
                 (pl.col("_r") * lab).sum().alias("_rpos"))
            .filter((pl.col("positives") >= min_positives) & (pl.col("negatives") >= 1))
            .with_columns(((pl.col("_rpos") - pl.col("positives") * (pl.col("positives") + 1) / 2)
                           / (pl.col("positives") * pl.col("negatives"))).alias("auroc"))
            .drop("_rpos").sort(keys))


def macro_auroc(frame: pl.DataFrame, min_positives: int = 3, **kwargs) -> tuple[float, int]:
    """Mean per-pair AUROC and the number of pairs it averages (NaN, 0 when no pair qualifies)."""
    per = pair_auroc(frame, min_positives, **kwargs)
    return (float(per["auroc"].mean()) if per.height else float("nan")), per.height


def matrix_macro_auroc(obj: np.ndarray, target: np.ndarray, prob: np.ndarray, pool: np.ndarray,
                       min_positives: int = 3) -> tuple[float, int]:
    """Macro AUROC from dense arrays: crops' object index (N,), targets and probs (N, A), pool (O, A)."""
    o, a = np.nonzero(pool[obj])
    frame = pl.DataFrame({"object": obj[o], "attribute": a, "label": target[o, a], "prob": prob[o, a]})
    return macro_auroc(frame, min_positives)


def within_pair_auroc(frame: pl.DataFrame, label: str = "label", score: str = "prob",
                      by: tuple[str, ...] = ("object", "attribute")) -> float:
    """One AUROC over all rows after centring each pair's logits on that pair's mean.

    Ranks images *within* each pair (as the per-pair AUROC does) but pools every positive, so it is far
    less noisy than a macro average on a small split; a model that only knows each pair's prevalence scores
    0.5. Pairs without a positive or a negative are left out.
    """
    keys = list(by)
    p = pl.col(score).cast(pl.Float64).clip(1e-7, 1 - 1e-7)
    logit = (p / (1 - p)).log()
    f = (frame.with_columns(logit.alias("_z"))
         .with_columns((pl.col("_z") - pl.col("_z").mean().over(keys)).round(9).alias("_c"),  # exact ties stay ties
                       pl.col(label).cast(pl.Int64).sum().over(keys).alias("_p"), pl.len().over(keys).alias("_n"))
         .filter((pl.col("_p") > 0) & (pl.col("_p") < pl.col("_n"))))
    return auroc(f[label].to_numpy(), f["_c"].to_numpy())
