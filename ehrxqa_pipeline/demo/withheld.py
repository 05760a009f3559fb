"""MIMIC-CXR patients withheld from MIMIC-IV, as in the real releases.

MIMIC-IV withholds some patients since 2.1: about 5 % of the MIMIC-CXR subjects are in no MIMIC-IV 2.2
table, while their chest X-ray metadata and Chest ImaGenome labels are published. The synthetic source
plants the same: ``round(scale.withheld_share x CXR patients)`` CXR patients, of which
``round(share x gold patients)`` are Chest ImaGenome gold patients, drawn from their own generator
(``cxr.withheld``), so no other draw of the generator moves. The EHR tables are generated for every
patient and the withheld patients' rows are then removed from every MIMIC-IV table that has a
``subject_id`` (the dictionaries stay whole), so every other patient's EHR rows are the ones a source
without withheld patients has.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.scale import Scale
from ehrxqa_pipeline.rng import generator


def pick_withheld(seed: int, scale: Scale, patients: pl.DataFrame) -> pl.Series:
    """subject_ids of the withheld patients (sorted): ``patients`` is the cohort's (has_cxr, is_gold)."""
    if not 0.0 <= scale.withheld_share <= 1.0:
        raise ValueError(f"withheld_share must lie in [0, 1], got {scale.withheld_share}")
    rng = generator(seed, "cxr.withheld")
    cxr = patients.filter("has_cxr")
    gold = cxr.filter("is_gold")["subject_id"].to_numpy()
    silver = cxr.filter(~pl.col("is_gold"))["subject_id"].to_numpy()
    n_gold = min(len(gold), int(np.floor(scale.withheld_share * len(gold) + 0.5)))
    n_total = int(np.floor(scale.withheld_share * cxr.height + 0.5))
    n_silver = min(len(silver), max(0, n_total - n_gold))
    picked = np.concatenate([rng.choice(gold, n_gold, replace=False), rng.choice(silver, n_silver, replace=False)])
    return pl.Series("subject_id", np.sort(picked), dtype=pl.Int64)


def withhold(tables: dict[str, pl.DataFrame], withheld: pl.Series) -> dict[str, pl.DataFrame]:
    """The MIMIC-IV tables without the withheld patients' rows (tables without subject_id unchanged)."""
    if withheld.is_empty():
        return tables
    gone = withheld.implode()
    return {name: df.filter(~pl.col("subject_id").is_in(gone)) if "subject_id" in df.columns else df
            for name, df in tables.items()}


def withheld_planted(withheld: pl.Series, patients: pl.DataFrame, metadata: pl.DataFrame,
                     gold_relations: pl.DataFrame) -> dict:
    """Exact counts: withheld patients and their metadata rows (images) per side, and their gold relation rows
    (the rows the contracts' foreign keys to ``patients`` find without a parent)."""
    side = (patients.filter(pl.col("subject_id").is_in(withheld.implode()))
            .select("subject_id", pl.when("is_gold").then(pl.lit("gold")).otherwise(pl.lit("silver")).alias("side")))
    images = metadata.join(side, on="subject_id").group_by("side").len()
    per_side = dict(images.iter_rows())
    counts = dict(side.group_by("side").len().iter_rows())
    n_cxr = patients.filter("has_cxr").height
    return {
        "share": round(withheld.len() / n_cxr, 6) if n_cxr else 0.0,
        "patients": {s: int(counts.get(s, 0)) for s in ("silver", "gold")},
        "images": {s: int(per_side.get(s, 0)) for s in ("silver", "gold")},
        "gold_relations_rows": int(gold_relations.filter(pl.col("patient_id").is_in(withheld.implode())).height),
    }
