"""Patient-disjoint silver train/valid split, stratified by how abnormal each patient's studies are.

The published split draws abnormal and normal studies' patients separately, so a patient with both kinds
lands in train and valid (defect 10). Here each PATIENT is assigned once: patients are grouped into strata
by the share of their studies with any affirmed finding (0, (0, 1/3], (1/3, 2/3], (2/3, 1), 1), shuffled
within a stratum by the step's own generator, and the first ``round(n * valid_fraction)`` of each stratum
go to valid. Gold images are the test split.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.rng import generator

VALID_FRACTION = 0.05


def assign_patient_splits(studies: pl.DataFrame, seed: int, valid_fraction: float = VALID_FRACTION
                          ) -> pl.DataFrame:
    """``studies``: subject_id, study_id, abnormal (bool). Returns subject_id, stratum, split."""
    patients = (studies.group_by("subject_id")
                .agg(pl.col("abnormal").mean().alias("share"))
                .with_columns(pl.when(pl.col("share") == 0).then(0)
                              .when(pl.col("share") == 1).then(4)
                              .otherwise((pl.col("share") * 3).ceil().cast(pl.Int64).clip(1, 3))
                              .alias("stratum"))
                .sort("subject_id"))
    rng = generator(seed, "splits.silver")
    parts = []
    for stratum in range(5):  # five strata, not a loop over rows
        group = patients.filter(pl.col("stratum") == stratum)
        order = rng.permutation(group.height)
        n_valid = int(round(group.height * valid_fraction))
        split = np.where(np.argsort(order) < n_valid, "valid", "train")
        parts.append(group.select("subject_id", "stratum").with_columns(pl.Series("split", split)))
    return pl.concat(parts).sort("subject_id")
