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


def expected_answer(key: str, pos: set[tuple[str, str]], img: dict, a: dict, category: dict[str, str]) -> list[str]:
    """Plain-Python statement of each program over one image's positives {(object, attribute)}, written
    independently of ehrxqa_pipeline.questions.mimic_cxr_vqa.programs (the oracle the tests compare it against)."""
    ABN = {"anatomicalfinding", "disease", "device", "tubesandlines"}
    o1, o2, a1, a2, c1, c2 = (a.get(k) for k in ("object_1", "object_2", "attribute_1", "attribute_2",
                                                "category_1", "category_2"))

    def attrs(obj=None, cats=None):
        return {at for o, at in pos if obj in (None, o) and (cats is None or category[at] in cats)}

    def objs(attr=None, cats=None):
        return {o for o, at in pos if attr in (None, at) and (cats is None or category[at] in cats)}

    def yn(b):
        return ["yes" if b else "no"]

    def pick(*options):
        return sorted(v for v, ok in options if ok)

    rules = {
        "base_1": lambda: yn(attrs(o1, {c1})), "base_2": lambda: yn((o1, a1) in pos),
        "base_abn_1": lambda: yn(attrs(o1, ABN)), "base_4": lambda: yn(attrs(o1, {c1, c2})),
        "base_5": lambda: yn((o1, a1) in pos and (o1, a2) in pos),
        "base_6": lambda: yn((o1, a1) in pos or (o1, a2) in pos),
        "base_9": lambda: sorted(attrs(o1, {c1})), "base_abn_2": lambda: sorted(attrs(o1, ABN)),
        "base_10": lambda: sorted(attrs(o1, {c1, c2})),
        "base_11": lambda: pick((a1, (o1, a1) in pos), (a2, (o1, a2) in pos)),
        "base_abn_3": lambda: yn(attrs(o1, ABN) or attrs(o2, ABN)),
        "base_abn_4": lambda: yn(attrs(o1, ABN) and attrs(o2, ABN)),
        "base_25": lambda: sorted(attrs(o1, {c1}) | attrs(o2, {c1})),
        "base_26": lambda: sorted(attrs(o1, {c1}) & attrs(o2, {c1})),
        "base_27": lambda: sorted(attrs(o1, {c1}) - attrs(o2, {c1})),
        "base_abn_5": lambda: sorted(attrs(o1, ABN) | attrs(o2, ABN)),
        "base_abn_6": lambda: sorted(attrs(o1, ABN) & attrs(o2, ABN)),
        "base_abn_7": lambda: sorted(attrs(o1, ABN) - attrs(o2, ABN)),
        "base_30": lambda: yn(attrs(cats={c1})), "base_abn_8": lambda: yn(attrs(cats=ABN)),
        "base_32": lambda: yn(attrs(cats={c1, c2})), "base_33": lambda: yn(objs(a1)),
        "base_34": lambda: yn(objs(a1) and objs(a2)), "base_35": lambda: yn(objs(a1) or objs(a2)),
        "base_40": lambda: sorted(attrs(cats={c1})), "base_41": lambda: sorted(attrs(cats={c1, c2})),
        "base_abn_9": lambda: sorted(attrs(cats=ABN)), "base_42": lambda: pick((a1, objs(a1)), (a2, objs(a2))),
        "base_45": lambda: yn((o1, a1) in pos and (o2, a1) in pos),
        "base_46": lambda: yn((o1, a1) in pos or (o2, a1) in pos),
        "base_49": lambda: sorted(objs(a1)), "base_50": lambda: pick((o1, (o1, a1) in pos), (o2, (o2, a1) in pos)),
        "base_abn_10": lambda: pick((o1, attrs(o1, ABN)), (o2, attrs(o2, ABN))),
        "base_58": lambda: sorted(objs(a1) | objs(a2)), "base_59": lambda: sorted(objs(a1) & objs(a2)),
        "base_60": lambda: sorted(objs(a1) - objs(a2)),
        "base_64": lambda: yn(attrs(o1, {c1}) and attrs(o2, {c1})),
        "base_65": lambda: yn(attrs(o1, {c1}) or attrs(o2, {c1})),
        "base_66": lambda: sorted(objs(cats={c1})), "base_73": lambda: sorted(objs(cats={c1, c2})),
        "viewpos_1": lambda: yn(img["view_position"] == a["viewpos"]),
        "viewpos_2": lambda: [img["view_position"].lower()], "viewpos_3": lambda: [img["view_position"].lower()],
        "gender_1": lambda: yn(img["gender"] == a["gender"]),
        "gender_2": lambda: [{"F": "female", "M": "male"}[img["gender"]]],
        "gender_3": lambda: [{"F": "female", "M": "male"}[img["gender"]]],
        "ct_ratio_1": lambda: yn(img["ctr"] > 0.5), "mt_ratio_1": lambda: yn(img["mtr"] > 1 / 3),
    }
    return rules[key]()
