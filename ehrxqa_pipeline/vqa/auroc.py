"""Rank-based AUROC (Mann-Whitney U with average ranks for ties) per (object, attribute) pair, and their mean.

Grain: ``pair_auroc`` -> one row per (object, attribute) pair with at least ``min_positives`` positives and one
negative; ``macro_auroc`` -> their mean.
Source: model scores (``Predictions.relations.prob`` or training logits) joined with 0/1 labels.
Used for model selection during training (``vqa.steps``); the rank formula itself is ``vqa.metrics`` (``auroc``,
``auroc_by_group``), shared with scoring.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.vqa import metrics


def pair_auroc(frame: pl.DataFrame, min_positives: int = 3, label: str = "label", score: str = "prob",
               by: tuple[str, ...] = ("object", "attribute")) -> pl.DataFrame:
    """Per-pair AUROC of ``score`` vs ``label`` (0/1) over the rows of ``frame`` (one row per image x pair).

    Returns object, attribute, positives, negatives, auroc for pairs with >= ``min_positives`` positives
    and >= 1 negative, sorted by the pair (``metrics.auroc_by_group`` with the training's support rule).
    """
    keys = list(by)
    return (metrics.auroc_by_group(frame, keys, score, label)
            .with_columns(negatives=pl.col("n") - pl.col("positives"))
            .filter((pl.col("positives") >= min_positives) & (pl.col("negatives") >= 1))
            .select(*keys, "positives", "negatives", "auroc"))


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
