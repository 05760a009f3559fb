"""How the tests score a model on held-out images: predictions joined with their labels, and the AUROC within
each (object, attribute) pair pooled over all pairs (steadier than a macro average on a tiny split)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.vqa import metrics
from ehrxqa_pipeline.vqa.predictions import Predictions


def auroc(y: np.ndarray, score: np.ndarray) -> float:
    """AUROC of ``score`` for binary ``y`` (``vqa.metrics.auroc``); NaN when y has only one class."""
    value = metrics.auroc(score, y)
    return float("nan") if value is None else value


def labelled_relations(con, preds: Predictions, labels: str = "gold") -> pl.DataFrame:
    """``preds.relations`` with ``label`` (1 = affirmed in ``cxr_labels.{labels}``, else 0)."""
    if labels not in ("silver", "gold"):
        raise ValueError(f"labels must be 'silver' or 'gold', not {labels!r}")
    pos = con.sql(f"SELECT DISTINCT image_id, object, attribute, 1::TINYINT AS label FROM cxr_labels.{labels}").pl()
    return (preds.relations.join(pos, on=["image_id", "object", "attribute"], how="left")
            .with_columns(pl.col("label").fill_null(0).cast(pl.Int8)))


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
