"""Synthetic Chest ImaGenome 1.0.0: silver/gold boxes and relations, plus the ground truth behind them.

Grain of the outputs: ``silver_bbox`` image x detector box; ``silver_relations`` / ``gold_relations`` image
x report sentence x object x attribute mention; ``gold_bbox`` gold image x corrected box; ``truth_boxes``
every frontal image x 36 boxes; ``truth_findings`` every frontal image x affirmed (object, attribute).

Planted defects are disjoint, so each selection rule drops exactly its own plants whatever the rule order:
R4 (36 boxes) and R5 (width within mean +- 3 sd) defects sit only on images that would otherwise reach
the silver cohort (one-per-study pick, StudyOrder <= 20, not a gold patient). Zero-area boxes (one box
flattened to height 0, as the real detector output has them) sit on other such images, which must stay in
the cohort: a zero-area box is still a box, and its width is natural. The expected funnels come
from the generator's bookkeeping (which image is the pick, which study order it has), never from running
the rules on the files; the R5 outliers are verified against the realised statistics because they move
the very mean and sd that judge them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.boxes import RATIO_BOXES, SIZE, fit_inside, make_boxes, ratios, width_params
from ehrxqa_pipeline.demo.cohort import MAX_STUDY_ORDER, Cohort
from ehrxqa_pipeline.demo.cxr_metadata import EXTRA, PRIMARY, image_book
from ehrxqa_pipeline.demo.imagenome.findings import ATT, OBJ, UNKNOWN, A, O, sample_truth, study_flags
from ehrxqa_pipeline.demo.imagenome.relations import TAG_AFF_FIRST, TAG_IMPOSSIBLE, TAG_NEG_FIRST, write_relations
from ehrxqa_pipeline.demo.imagenome.tables import (gold_bbox_frame, relations_frame, silver_bbox_frame,
                                                   truth_boxes_frame)
from ehrxqa_pipeline.demo.ontology import (BOX_OBJECTS, REMOVED_ATTRIBUTES, REMOVED_OBJECTS, closed_possible,
                                           label_pair_count)
from ehrxqa_pipeline.demo.scale import Scale
from ehrxqa_pipeline.rng import generator

N_BOX = len(BOX_OBJECTS)


@dataclass(frozen=True)
class ImagenomePart:
    tables: dict[str, pl.DataFrame]  # silver_bbox, silver_relations, gold_relations, gold_bbox
    truth_boxes: pl.DataFrame  # dicom_id, bbox_name, x1, y1, x2, y2 -- every frontal image, 224 space
    truth_findings: pl.DataFrame  # dicom_id, bbox_name, label_name -- affirmed by the report's last word
    planted: dict


def _frontal(book: pl.DataFrame, meta: pl.DataFrame) -> pl.DataFrame:
    """Frontal images in (subject, study, pick-first) order with img (row) and sidx (frontal study) ids."""
    fi = (book.filter(pl.col("kind") <= EXTRA)
          .join(meta.select("dicom_id", "Rows", "Columns"), on="dicom_id", maintain_order="left")
          .sort("subject_id", "pos", "kind", "dicom_id"))
    studies = fi.select("study_id").unique(maintain_order=True).with_row_index("sidx")
    return (fi.join(studies, on="study_id", maintain_order="left").with_row_index("img")
            .with_columns(pl.col("img", "sidx").cast(pl.Int64)))


def _choose(rng, idx: np.ndarray, k: int) -> np.ndarray:
    return np.sort(rng.choice(idx, min(k, len(idx)), replace=False)) if len(idx) else idx


def _outliers(rng, truth: np.ndarray, imgs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Silver boxes with one width moved 7-10 natural sd off per image; spread over the non-ratio boxes
    so that no box collects enough outliers to inflate its own sd past them."""
    eligible = np.array([i for i, b in enumerate(BOX_OBJECTS) if b not in RATIO_BOXES])
    box = rng.permutation(eligible)[np.arange(len(imgs)) % len(eligible)]
    mu, sd = np.array([width_params(BOX_OBJECTS[b]) for b in box]).T.reshape(2, -1)
    up, down = mu + 10 * sd <= SIZE - 4, mu - 10 * sd >= 3
    sign = np.where(up & down, rng.choice([-1, 1], len(imgs)), np.where(up, 1, -1))
    k = rng.uniform(7, 10, len(imgs))
    width = np.rint(mu + sign * k * sd)
    silver = truth.copy()
    cell = truth[imgs, box]
    x1 = np.rint((cell[:, 0] + cell[:, 2]) / 2 - width / 2)
    silver[imgs, box, 0], silver[imgs, box, 2] = x1, x1 + width
    return fit_inside(silver), box, k * sign


def _zero_area(rng, silver: np.ndarray, imgs: np.ndarray) -> np.ndarray:
    """Flatten one box per image to height 0 (y2 = y1), keeping its width; only boxes that carry no ratio."""
    eligible = np.array([i for i, b in enumerate(BOX_OBJECTS) if b not in RATIO_BOXES])
    box = rng.choice(eligible, len(imgs))
    silver[imgs, box, 3] = silver[imgs, box, 1]
    return box


def _verify_outliers(silver: np.ndarray, keep: np.ndarray, cohort: np.ndarray, out_img, out_box) -> dict:
    """Every planted outlier lies outside mean +- 3 sd and every other cohort width inside, whether the
    statistics come from the R4-passing cohort images or from the whole box file."""
    w = (silver[..., 2] - silver[..., 0]).astype(np.float64)
    is_out = np.zeros(w.shape, bool)
    is_out[out_img, out_box] = True
    report = {}
    for name, mask in (("cohort", cohort[:, None] & keep), ("whole_file", keep)):
        vals = np.where(mask, w, np.nan)
        z = np.abs(w - np.nanmean(vals, 0)) / np.nanstd(vals, 0, ddof=1)
        natural, planted = z[cohort[:, None] & keep & ~is_out], z[is_out]
        if natural.size and natural.max() >= 3 or planted.size and planted.min() <= 3:
            raise RuntimeError(f"width outliers not exact against {name} statistics")
        report[name] = {"max_natural_z": round(float(natural.max()), 3) if natural.size else None,
                        "min_outlier_z": round(float(planted.min()), 3) if planted.size else None}
    return report


def _relation_counts(rows: pl.DataFrame, images: pl.DataFrame) -> dict:
    """Exact counts of a relation file, by the pipeline's filter order (nlp, unknown, removed, impossible)."""
    poss = np.zeros((len(OBJ), len(ATT)), bool)
    for o, a in closed_possible():
        poss[O[o], A[a]] = True
    w = rows.join(images.group_by("sidx").len(), on="sidx")
    code = (w["obj"].cast(pl.Int64) * len(ATT) + w["att"].cast(pl.Int64)).to_numpy()
    w = w.with_columns(possible=pl.Series(poss.ravel()[code]))
    nlp = pl.col("cat") == 5
    unknown = ~nlp & (pl.col("obj") == UNKNOWN)
    removed = ~nlp & ~unknown & (pl.col("att").is_in([A[a] for a in REMOVED_ATTRIBUTES])
                                 | pl.col("obj").is_in([O[o] for o in REMOVED_OBJECTS]))
    possible = pl.col("possible")
    total = lambda cond: int(w.filter(cond)["len"].sum())  # noqa: E731
    return {
        "rows": int(w["len"].sum()), "images": images.height, "nlp_rows": total(nlp),
        "unknown_bbox_rows": total(unknown), "removed_label_rows": total(removed),
        "impossible_pair_rows": total(~nlp & ~unknown & ~removed & ~possible),
        "impossible_negation_plants": total(pl.col("tag") == TAG_IMPOSSIBLE),
        "conflict_pairs_negated_then_affirmed": total(pl.col("tag") == TAG_NEG_FIRST),
        "conflict_pairs_affirmed_then_negated": total(pl.col("tag") == TAG_AFF_FIRST),
        "negated_rows": total(~nlp & (pl.col("rel") == 0)),
    }


def _funnels(fi: pl.DataFrame, n_images: int, n_r4: int, n_r5: int) -> dict:
    studies = fi.filter(pl.col("kind") == PRIMARY)
    r3 = studies.filter(pl.col("frontal_order") <= MAX_STUDY_ORDER)
    gold = int(r3["is_gold"].sum())
    head = [["all_images", n_images], ["R1_frontal", fi.height], ["R2_one_per_study", studies.height],
            ["R3_study_order_le_20", r3.height]]
    return {"silver": [*head, ["R4_36_boxes", r3.height - n_r4], ["R5_width_within_3sd", r3.height - n_r4 - n_r5],
                       ["R6_not_gold_patient", r3.height - n_r4 - n_r5 - gold]],
            "gold": [*head, ["gold_patients", gold], ["gold_first_study_image", gold]]}


def make_imagenome(seed: int, scale: Scale, cohort: Cohort, metadata: pl.DataFrame | None = None) -> ImagenomePart:
    """Boxes, relations and truth for ``cohort``; ``metadata`` must be make_cxr_metadata's table for the
    same (seed, scale, cohort) -- its bookkeeping is rebuilt here, deterministically."""
    meta, book = image_book(seed, scale, cohort)
    if metadata is not None and not metadata["dicom_id"].equals(meta["dicom_id"]):
        raise ValueError("metadata is not make_cxr_metadata(seed, scale, cohort) for this seed/scale/cohort")
    fi = _frontal(book, meta)
    primaries = fi.filter(pl.col("kind") == PRIMARY)
    truth, truth_counts = sample_truth(generator(seed, "imagenome.truth"),
                                       (primaries["ViewPosition"] == "AP").to_numpy())
    enlarged, widened = study_flags(truth, primaries.height)
    sidx = fi["sidx"].to_numpy()
    boxes = make_boxes(generator(seed, "imagenome.boxes"), enlarged[sidx], widened[sidx])

    rng = generator(seed, "imagenome.plants")
    primary = (fi["kind"] == PRIMARY).to_numpy()
    order = fi["frontal_order"].to_numpy()
    gold = fi["is_gold"].to_numpy()
    cand = np.flatnonzero(primary & (order <= MAX_STUDY_ORDER) & ~gold)
    k = [max(1, round(r * len(cand))) for r in (0.004, 0.002, 0.004)]
    pick = rng.permutation(_choose(rng, cand, sum(k)))
    partial, absent, outlier = np.sort(pick[:k[0]]), np.sort(pick[k[0]:k[0] + k[1]]), np.sort(pick[k[0] + k[1]:])
    silver, out_box, out_k = _outliers(rng, boxes, outlier)
    keep = np.ones((fi.height, N_BOX), bool)
    keep[absent] = False
    missing = rng.integers(1, 7, len(partial))  # 30..35 boxes left
    drop_rank = np.argsort(rng.random((len(partial), N_BOX)), 1)
    keep[partial] = drop_rank >= missing[:, None]
    cohort_mask = primary & (order <= MAX_STUDY_ORDER)
    cohort_mask[partial] = cohort_mask[absent] = False
    r5_check = _verify_outliers(silver, keep, cohort_mask, outlier, out_box)
    # Their own generator, so the plants above (and everything downstream of them) do not move.
    zrng = generator(seed, "imagenome.zero_area")
    zero = _choose(zrng, np.setdiff1d(cand, pick), max(1, round(0.02 * len(cand))))
    zero_box = _zero_area(zrng, silver, zero)

    rows_np, cols_np = fi["Rows"].to_numpy(), fi["Columns"].to_numpy()
    dicom = fi["dicom_id"]
    gold_img = fi["gold_image"].to_numpy()
    gold_second = primary & gold & (order == 2)
    gb = np.flatnonzero(gold_img | gold_second)
    fixed = [BOX_OBJECTS.index(b) for b in RATIO_BOXES]
    gold_bbox = gold_bbox_frame(generator(seed, "imagenome.gold_bbox"), dicom.gather(gb), boxes[gb],
                                rows_np[gb], cols_np[gb], fixed, [BOX_OBJECTS.index("mediastinum")], 22 / 31)

    # Some later-study images of gold patients have no silver relations at all (as in the real release).
    later = np.flatnonzero(primary & gold & (order >= 2) & (order <= MAX_STUDY_ORDER))
    no_rel = _choose(rng, later, max(1, round(0.05 * scale.gold_patients)))
    rel_keep = np.ones(fi.height, bool)
    rel_keep[no_rel] = False
    cols = ["sidx", "dicom_id", "study_id", "subject_id"]
    s_images = fi.filter(pl.Series(rel_keep)).select(cols).with_row_index("img").with_columns(pl.col("img").cast(pl.Int64))
    s_rows = write_relations(generator(seed, "imagenome.silver_relations"), truth, primaries.height)
    g_images = fi.filter(pl.col("gold_image")).select(cols).with_row_index("img").with_columns(
        pl.col("img").cast(pl.Int64), gsidx=pl.int_range(pl.len(), dtype=pl.Int64))
    g_truth = truth.join(g_images.select("sidx", "gsidx"), on="sidx").drop("sidx").rename({"gsidx": "sidx"})
    g_rows = write_relations(generator(seed, "imagenome.gold_relations"), g_truth, g_images.height)
    g_images = g_images.drop("sidx").rename({"gsidx": "sidx"})

    s_counts, g_counts = _relation_counts(s_rows, s_images), _relation_counts(g_rows, g_images)
    tables = {"silver_bbox": silver_bbox_frame(dicom, silver, keep, rows_np, cols_np)}
    del silver
    tables["silver_relations"] = relations_frame(s_rows, s_images, gold=False)
    del s_rows  # the study-level rows are the largest intermediate; free them before the truth frames
    tables["gold_relations"] = relations_frame(g_rows, g_images, gold=True)
    tables["gold_bbox"] = gold_bbox
    findings = truth.join(fi.select("sidx", "img", "dicom_id"), on="sidx").sort("img", "obj", "att")
    truth_findings = findings.select(
        "dicom_id", bbox_name=pl.Series(OBJ, dtype=pl.String).gather(findings["obj"].cast(pl.Int64)),
        label_name=pl.Series(ATT, dtype=pl.String).gather(findings["att"].cast(pl.Int64)))
    ctr, mtr = ratios(boxes)
    en_img, wi_img = enlarged[sidx], widened[sidx]
    planted = {
        "frontal_images": fi.height, "frontal_studies": primaries.height,
        "silver_candidates": len(cand),
        "images_30_35_boxes": len(partial), "boxes_removed": int(missing.sum()),
        "images_absent_from_bbox": len(absent), "width_outlier_images": len(outlier),
        "width_outliers_by_box": {BOX_OBJECTS[b]: int(c) for b, c in zip(*np.unique(out_box, return_counts=True))},
        "width_outlier_check": r5_check,
        "zero_area_box_images": len(zero), "zero_area_boxes": len(zero_box),
        "zero_area_boxes_by_box": {BOX_OBJECTS[b]: int(c) for b, c in zip(*np.unique(zero_box, return_counts=True))},
        "gold_patients": int(gold_img.sum()),
        "gold_image_not_r2_pick": int((gold_img & ~primary).sum()),
        "gold_bbox_images": len(gb), "gold_bbox_rows": gold_bbox.height,
        "gold_later_images_without_silver_relations": len(no_rel),
        "images_without_silver_relations": sorted(dicom.gather(no_rel).to_list()),
        "funnel": _funnels(fi, book.height, len(partial) + len(absent), len(outlier)),
        "truth": {**truth_counts, "enlarged_heart_images": int(en_img.sum()),
                  "widened_mediastinum_images": int(wi_img.sum()), "truth_finding_rows": truth_findings.height,
                  "ctr_gt_half_iff_enlarged": bool(((ctr > 0.5) == en_img).all()),
                  "mtr_gt_third_if_widened": bool((mtr[wi_img] > 1 / 3).all()),
                  "mtr_gt_third_without_widening": int((mtr[~wi_img] > 1 / 3).sum())},
        "silver_relations": s_counts, "gold_relations": g_counts,
        "ontology_possible_pairs": label_pair_count(),
    }
    return ImagenomePart(tables=tables, truth_boxes=truth_boxes_frame(dicom, boxes),
                         truth_findings=truth_findings, planted=planted)
