"""How good the reference model is on labelled images: the numbers for the asset metadata and the tests.

Grain: one report (dict) per (Predictions, label set); ``per_pair`` has one row per (object, attribute)
with >= ``min_positives`` positives among the predicted images.
Sources: ``Predictions`` from ``vqa.infer``; ``cxr_labels.gold`` / ``cxr_labels.silver`` (sparse
positives, negatives implied over the pool) and ``splits.images`` (view position, sex).

- ``macro_auroc``: mean per-pair AUROC (E.1.3 of the paper uses pairs with >= 10 test positives; the demo
  test split is small, so the threshold is a parameter).
- ``verify_acc`` vs ``verify_majority_acc``: "Is there ${attribute} in the ${object}?" answered yes iff
  prob >= threshold, over every (image, pool pair) predicted, against always answering the majority ("no").
- ``balanced_verify_acc``: the same on a balanced set (per pair: every positive and as many negatives,
  sampled with a fixed seed), where the majority answer scores 0.5, like MIMIC-CXR-VQA's balanced
  verify questions.
"""

from __future__ import annotations

import polars as pl

from ehrxqa_pipeline.vqa.auroc import pair_auroc
from ehrxqa_pipeline.vqa.predictions import Predictions


def labelled_relations(con, preds: Predictions, labels: str = "gold") -> pl.DataFrame:
    """``preds.relations`` with ``label`` (1 = affirmed in ``cxr_labels.{labels}``, else 0)."""
    if labels not in ("silver", "gold"):
        raise ValueError(f"labels must be 'silver' or 'gold', not {labels!r}")
    pos = con.sql(f"SELECT DISTINCT image_id, object, attribute, 1::TINYINT AS label FROM cxr_labels.{labels}").pl()
    return (preds.relations.join(pos, on=["image_id", "object", "attribute"], how="left")
            .with_columns(pl.col("label").fill_null(0).cast(pl.Int8)))


def reference_report(con, preds: Predictions, labels: str = "gold", min_positives: int = 3,
                     threshold: float = 0.5, seed: int = 0) -> dict:
    rel = labelled_relations(con, preds, labels)
    per = pair_auroc(rel, min_positives)
    yes = pl.col("prob") >= threshold
    acc = rel.select((yes == (pl.col("label") == 1)).mean()).item() if rel.height else float("nan")
    majority = max(rel["label"].mean(), 1 - rel["label"].mean()) if rel.height else float("nan")
    pos = rel.filter(pl.col("label") == 1)
    neg = (rel.filter(pl.col("label") == 0).join(pos.group_by("object", "attribute").len("k"),
                                                  on=["object", "attribute"])
           .with_columns(pl.int_range(pl.len()).shuffle(seed).over("object", "attribute").alias("_r"))
           .filter(pl.col("_r") < pl.col("k")).drop("_r", "k"))
    bal = pl.concat([pos, neg])
    bal_acc = bal.select((yes == (pl.col("label") == 1)).mean()).item() if bal.height else float("nan")
    truth = con.sql("SELECT image_id, view_position, gender FROM splits.images").pl()
    img = preds.images.join(truth, on="image_id", how="left")
    return {
        "labels": labels, "images": preds.images.height, "relations": rel.height, "positives": pos.height,
        "macro_auroc": float(per["auroc"].mean()) if per.height else float("nan"), "auroc_pairs": per.height,
        "min_positives": min_positives, "threshold": threshold, "verify_acc": acc,
        "verify_majority_acc": majority, "balanced_verify_acc": bal_acc, "balanced_verify_items": bal.height,
        "view_acc": img.select(((pl.col("p_pa") >= 0.5) == (pl.col("view_position") == "PA")).mean()).item(),
        "sex_acc": img.select(((pl.col("p_male") >= 0.5) == (pl.col("gender") == "M")).mean()).item(),
        "per_pair": per,
    }
