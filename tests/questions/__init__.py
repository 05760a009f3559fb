"""Tests of the question builders. ``vqa_fixture`` builds small MIMIC-CXR-VQA inputs in the real schema."""

from __future__ import annotations

import numpy as np
import polars as pl

# A small ontology pool: object -> attributes possible there; attribute -> category.
CATEGORY = {
    "lung opacity": "anatomicalfinding", "pleural effusion": "anatomicalfinding",
    "atelectasis": "anatomicalfinding", "pneumothorax": "anatomicalfinding",
    "enlarged cardiac silhouette": "anatomicalfinding", "scoliosis": "anatomicalfinding",
    "clavicle fracture": "anatomicalfinding", "pneumonia": "disease", "lung cancer": "disease",
    "pericardial effusion": "disease", "low lung volumes": "technicalassessment",
    "rotated": "technicalassessment", "endotracheal tube": "tubesandlines", "chest tube": "tubesandlines",
    "picc": "tubesandlines", "cardiac pacer and wires": "device", "prosthetic valve": "device",
}
_LUNG = ["lung opacity", "pleural effusion", "atelectasis", "pneumothorax", "pneumonia", "lung cancer",
         "low lung volumes", "chest tube"]
POSSIBLE = {
    "left lung": _LUNG, "right lung": _LUNG,
    "left lower lung zone": ["lung opacity", "pleural effusion", "atelectasis", "pneumonia"],
    "right lower lung zone": ["lung opacity", "pleural effusion", "atelectasis", "pneumonia"],
    "cardiac silhouette": ["enlarged cardiac silhouette", "pericardial effusion", "cardiac pacer and wires",
                           "prosthetic valve"],
    "mediastinum": ["enlarged cardiac silhouette", "endotracheal tube", "picc", "cardiac pacer and wires",
                    "rotated"],
    "spine": ["scoliosis", "rotated"],
    "trachea": ["endotracheal tube"],
    "left clavicle": ["clavicle fracture"], "right clavicle": ["clavicle fracture"],
}


def pairs_frame() -> pl.DataFrame:
    rows = [(o, a, CATEGORY[a]) for o, attrs in POSSIBLE.items() for a in attrs]
    return pl.DataFrame(rows, schema=["object", "attribute", "category"], orient="row")


def vqa_fixture(n_images: int = 300, seed: int = 0, splits=("train", "valid", "test"), p: float = 0.25):
    """(pairs, positives, images) with random labels; about one in eight images has no ratio."""
    rng = np.random.default_rng(seed)
    pairs = pairs_frame()
    ids = [f"img{i:05d}" for i in range(n_images)]
    # per-image abnormality level so some images are normal and some very abnormal
    level = rng.choice([0.0, p / 2, p, 2 * p], size=n_images)
    hit = rng.random((n_images, pairs.height)) < level[:, None]
    ii, jj = np.nonzero(hit)
    positives = pl.DataFrame({"image_id": [ids[i] for i in ii], "object": pairs["object"].gather(jj),
                              "attribute": pairs["attribute"].gather(jj)})
    ctr = rng.normal(0.5, 0.05, n_images)
    mtr = rng.normal(0.33, 0.04, n_images)
    missing = rng.random(n_images) < 0.125
    subject = 10000000 + np.arange(n_images) // 2
    images = pl.DataFrame({
        "image_id": ids,
        "subject_id": pl.Series(subject, dtype=pl.Int64),
        "study_id": pl.Series(50000000 + np.arange(n_images), dtype=pl.Int64),
        "split": [splits[i % len(splits)] for i in range(n_images)],
        "view_position": rng.choice(["AP", "PA"], n_images, p=[0.7, 0.3]).tolist(),
        "gender": rng.choice(["F", "M"], n_images).tolist(),
        "image_path": [f"p{str(s)[:2]}/p{s}/s{50000000 + i}/{ids[i]}.jpg" for i, s in enumerate(subject)],
        "ctr": pl.Series(np.where(missing, np.nan, ctr)).fill_nan(None),
        "mtr": pl.Series(np.where(missing, np.nan, mtr)).fill_nan(None),
    })
    return pairs, positives, images
