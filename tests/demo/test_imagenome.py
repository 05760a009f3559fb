"""Synthetic Chest ImaGenome: layouts, boxes, CTR/MTR, last-sentence-wins truth, and every planted funnel
number re-derived here with plain polars from the output tables (independent of the generator's books)."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.demo.cohort import make_cohort
from ehrxqa_pipeline.demo.cxr_metadata import make_cxr_metadata
from ehrxqa_pipeline.demo.imagenome import make_imagenome
from ehrxqa_pipeline.demo.ontology import (BOX_OBJECTS, REMOVED_ATTRIBUTES, REMOVED_OBJECTS, closed_possible)
from ehrxqa_pipeline.demo.scale import SCALES
from ehrxqa_pipeline.sources.schema import TABLES

SCALE = SCALES["demo"].with_patients(120)
FRONTAL = pl.col("ViewPosition").is_in(["AP", "PA"])
DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String}


def image_datetime(meta: pl.DataFrame) -> pl.Expr:
    """StudyDate + zero-padded StudyTime ("%010.3f") -> Datetime, as the pipeline builds StudyDateTime."""
    text = pl.col("StudyDate").cast(pl.String) + pl.col("StudyTime").map_elements(
        lambda v: f"{v:010.3f}", return_dtype=pl.String)
    return text.str.to_datetime("%Y%m%d%H%M%S%.3f", time_unit="ms")


@pytest.fixture(scope="module")
def built():
    cohort = make_cohort(3, SCALE)
    meta, _ = make_cxr_metadata(3, SCALE, cohort)
    return cohort, meta, make_imagenome(3, SCALE, cohort, meta)


def strip(col: str) -> pl.Expr:
    return pl.col(col).str.strip_suffix(".dcm").alias("dicom_id")


def test_layouts(built):
    _, _, part = built
    for name, df in part.tables.items():
        spec = TABLES[name]
        assert df.columns == list(spec.header), name
        assert dict(df.schema) == {c.name: DTYPES[c.type] for c in spec.columns}, name
        assert df.select(pl.col(spec.required).null_count().sum()).sum_horizontal().item() == 0, name


def test_determinism(built):
    cohort, meta, part = built
    again = make_imagenome(3, SCALE, cohort, meta)
    for name in part.tables:
        assert again.tables[name].equals(part.tables[name]), name
    assert again.truth_boxes.equals(part.truth_boxes) and again.truth_findings.equals(part.truth_findings)
    assert again.planted == part.planted


def test_boxes(built):
    _, meta, part = built
    sb, tb = part.tables["silver_bbox"], part.truth_boxes
    assert set(sb["bbox_name"]) == set(BOX_OBJECTS)
    assert (sb["object_id"] == sb["object_id"].str.split("_").list.first() + "_" + sb["bbox_name"]).all()
    assert (sb["width"] == sb["x2"] - sb["x1"]).all() and (sb["height"] == sb["y2"] - sb["y1"]).all()
    # Zero-area boxes as the real detector output has them: height 0, natural width, never a ratio box.
    flat = sb.filter((pl.col("width") == 0) | (pl.col("height") == 0))
    planted = part.planted
    assert flat.height == planted["zero_area_boxes"] == planted["zero_area_box_images"] > 1
    assert (flat["height"] == 0).all() and (flat["width"] > 0).all()
    by_box = flat.group_by("bbox_name").len().sort("bbox_name").rows()
    assert by_box == sorted(planted["zero_area_boxes_by_box"].items())
    assert not set(flat["bbox_name"]) & {"right lung", "left lung", "cardiac silhouette", "upper mediastinum"}
    frontal = meta.filter(FRONTAL)
    assert tb.height == 36 * frontal.height and set(tb["dicom_id"]) == set(frontal["dicom_id"])
    assert tb.group_by("dicom_id").agg(pl.col("bbox_name").n_unique())["bbox_name"].min() == 36
    # Patient's right lung on the image left.
    lungs = tb.filter(pl.col("bbox_name").is_in(["right lung", "left lung"])).pivot(
        "bbox_name", index="dicom_id", values="x1")
    assert (lungs["right lung"] < lungs["left lung"]).all()
    # original_* is the 224 space scaled to the image size.
    o = sb.with_columns(pl.col("object_id").str.split("_").list.first().alias("dicom_id")).join(meta, on="dicom_id")
    assert ((o["original_x2"] - o["x2"] * o["Columns"] / 224).abs() < 0.01).all()
    gb = part.tables["gold_bbox"]
    assert "mediastinum" not in set(gb["bbox_name"])
    per_image = gb.group_by("image_id").len()["len"]
    assert 20 <= per_image.mean() <= 32 and per_image.max() <= 35
    coords = gb["coord224"].str.strip_chars("[]").str.split(", ").list.eval(pl.element().cast(pl.Float64))
    assert (coords.list.get(0) == gb["x1"]).all() and (coords.list.get(3) == gb["y2"]).all()
    moved = gb.select(strip("image_id"), "bbox_name", "x1", "y1").join(
        tb, on=["dicom_id", "bbox_name"], suffix="_t")
    assert ((moved["x1"] - moved["x1_t"]).abs().max() <= 2) and (moved["y1"] != moved["y1_t"]).any()


def ratios(boxes: pl.DataFrame, id_col: str) -> pl.DataFrame:
    w = boxes.with_columns(w=pl.col("x2") - pl.col("x1")).pivot("bbox_name", index=id_col, values=["x1", "x2", "w"])
    thorax = pl.col("x2_left lung") - pl.col("x1_right lung")
    return w.select(id_col, ctr=pl.col("w_cardiac silhouette") / thorax, mtr=pl.col("w_upper mediastinum") / thorax)


def test_ctr_mtr_follow_findings(built):
    _, _, part = built
    f = part.truth_findings
    enlarged = set(f.filter((pl.col("bbox_name") == "cardiac silhouette")
                            & (pl.col("label_name") == "enlarged cardiac silhouette"))["dicom_id"])
    widened = set(f.filter(pl.col("bbox_name").is_in(["mediastinum", "upper mediastinum"]) & pl.col("label_name").is_in(
        ["mediastinal widening", "superior mediastinal mass/enlargement"]))["dicom_id"])
    r = ratios(part.truth_boxes, "dicom_id")
    assert enlarged and widened
    assert ((r["ctr"] > 0.5) == r["dicom_id"].is_in(list(enlarged))).all()
    assert (r.filter(pl.col("dicom_id").is_in(list(widened)))["mtr"] > 1 / 3).all()
    assert (r.filter(~pl.col("dicom_id").is_in(list(widened)))["mtr"] > 1 / 3).mean() < 0.1
    # Gold boxes keep the answer: CTR/MTR on coord224 ints agree with the truth.
    g = part.tables["gold_bbox"].select(strip("image_id"), "bbox_name", "x1", "x2")
    gr = ratios(g, "dicom_id")
    assert ((gr["ctr"] > 0.5) == gr["dicom_id"].is_in(list(enlarged))).all()
    assert (gr.filter(pl.col("dicom_id").is_in(list(widened)))["mtr"] > 1 / 3).all()


def last_sentence_wins(rel: pl.DataFrame) -> pl.DataFrame:
    located = rel.filter((pl.col("categoryID") != "nlp") & (pl.col("bbox") != "unknown"))
    located = located.with_columns(sent=pl.col("row_id").str.split("|").list.last().cast(pl.Float64))
    last = located.sort("sent").group_by(strip("image_id"), "bbox", "label_name").agg(pl.col("relation").last())
    return last.filter(pl.col("relation") == 1).select("dicom_id", bbox_name="bbox", label_name="label_name")


@pytest.mark.parametrize("name", ["silver_relations", "gold_relations"])
def test_last_sentence_wins_is_truth(built, name):
    _, _, part = built
    rel = part.tables[name]
    assert (rel["row_id"].str.split("|").list.last().cast(pl.Float64) == rel["sent_loc"]).all()
    got = last_sentence_wins(rel).sort(pl.all())
    images = rel.select(strip("image_id")).unique()
    want = part.truth_findings.join(images, on="dicom_id").sort(pl.all())
    assert got.equals(want)
    assert rel.height / images.height > 30


def test_relation_plants(built):
    _, meta, part = built
    rel, planted = part.tables["silver_relations"], part.planted["silver_relations"]
    frontal = set(meta.filter(FRONTAL)["dicom_id"])
    images = set(rel.select(strip("image_id"))["dicom_id"])
    assert images == frontal - set(part.planted["images_without_silver_relations"])
    assert set(part.tables["gold_relations"].select(strip("image_id"))["dicom_id"]) <= images | frontal
    nlp = pl.col("categoryID") == "nlp"
    unknown = ~nlp & (pl.col("bbox") == "unknown")
    removed = ~nlp & ~unknown & (pl.col("label_name").is_in(REMOVED_ATTRIBUTES) | pl.col("bbox").is_in(REMOVED_OBJECTS))
    poss = pl.DataFrame(list(closed_possible()), schema=["bbox", "label_name"], orient="row").with_columns(ok=True)
    rest = rel.filter(~nlp & ~unknown & ~removed).join(poss, on=["bbox", "label_name"], how="left")
    assert set(rel.filter(nlp)["label_name"]) == {"normal", "abnormal"}
    assert rel.filter(nlp).height == planted["nlp_rows"] > 0
    assert rel.filter(unknown).height == planted["unknown_bbox_rows"] > 0
    assert rel.filter(removed).height == planted["removed_label_rows"] > 0
    assert rest["ok"].null_count() == planted["impossible_pair_rows"] > 0
    flips = (rel.filter(~nlp & ~unknown).sort("sent_loc").group_by("image_id", "bbox", "label_name")
             .agg(last=pl.col("relation").last(), kinds=pl.col("relation").n_unique()).filter(pl.col("kinds") == 2))
    assert flips.filter(pl.col("last") == 1).height == planted["conflict_pairs_negated_then_affirmed"] > 0
    assert flips.filter(pl.col("last") == 0).height == planted["conflict_pairs_affirmed_then_negated"] > 0
    assert set(rel["context"]) == {"yes", "no"}


def rederive_funnels(meta, silver_bbox, gold_relations) -> dict:
    """R1..R6 and the gold cohort, written from the rule text, on the output tables only."""
    m = meta.with_columns(dt=image_datetime(meta))
    r1 = m.filter(FRONTAL)
    r2 = r1.sort("study_id", "dt", "dicom_id").unique("study_id", keep="first")
    ranked = r2.sort("subject_id", "dt", "study_id").with_columns(order=pl.int_range(1, pl.len() + 1).over("subject_id"))
    r3 = ranked.filter(pl.col("order") <= 20)
    boxes = silver_bbox.with_columns(dicom_id=pl.col("object_id").str.split("_").list.first())
    n36 = boxes.group_by("dicom_id").agg(pl.col("bbox_name").n_unique().alias("n")).filter(pl.col("n") == 36)
    r4 = r3.join(n36, on="dicom_id", how="semi")
    w = boxes.join(r4.select("dicom_id"), on="dicom_id")
    stats = w.group_by("bbox_name").agg(mu=pl.col("width").mean(), sd=pl.col("width").std())
    bad = w.join(stats, on="bbox_name").filter((pl.col("width") - pl.col("mu")).abs() > 3 * pl.col("sd"))
    r5 = r4.join(bad.select("dicom_id").unique(), on="dicom_id", how="anti")
    gold_subjects = gold_relations["patient_id"].unique()
    r6 = r5.filter(~pl.col("subject_id").is_in(gold_subjects.implode()))
    g = r3.filter(pl.col("subject_id").is_in(gold_subjects.implode()))
    gold_images = gold_relations.select(strip("image_id")).unique()
    replaced = pl.concat([g.filter(pl.col("order") != 1).select("dicom_id"), gold_images])
    assert replaced.height == g.height and g.filter(pl.col("order") == 1).height == gold_images.height
    head = [["all_images", m.height], ["R1_frontal", r1.height], ["R2_one_per_study", r2.height],
            ["R3_study_order_le_20", r3.height]]
    return {"silver": [*head, ["R4_36_boxes", r4.height], ["R5_width_within_3sd", r5.height],
                       ["R6_not_gold_patient", r6.height]],
            "gold": [*head, ["gold_patients", g.height], ["gold_first_study_image", replaced.height]],
            "gold_not_pick": gold_images.join(g, on="dicom_id", how="anti").height}


def test_funnels_rederived(built):
    _, meta, part = built
    got = rederive_funnels(meta, part.tables["silver_bbox"], part.tables["gold_relations"])
    assert got["silver"] == part.planted["funnel"]["silver"]
    assert got["gold"] == part.planted["funnel"]["gold"]
    assert got["gold_not_pick"] == part.planted["gold_image_not_r2_pick"] >= 1
    drops = [a[1] - b[1] for a, b in zip(got["silver"], got["silver"][1:])]
    assert all(d > 0 for d in drops), got["silver"]  # every rule has something to drop


def test_gold_files(built):
    cohort, meta, part = built
    gr, gb = part.tables["gold_relations"], part.tables["gold_bbox"]
    gold = cohort.patients.filter("is_gold")["subject_id"]
    assert set(gr["patient_id"]) == set(gold) and gr.select(pl.col("image_id").n_unique()).item() == len(gold)
    first = gr.select("patient_id", "study_id").unique().join(
        cohort.studies.sort("study_datetime", "study_id").group_by("subject_id", maintain_order=True).first(),
        left_on="patient_id", right_on="subject_id")
    assert (first["study_id"] == first["study_id_right"]).all()
    assert gb["image_id"].n_unique() == 2 * len(gold)
    assert set(gr["image_id"]) <= set(gb["image_id"])
    silver_images = set(part.tables["silver_bbox"]["object_id"].str.split("_").list.first())
    assert set(gr.select(strip("image_id"))["dicom_id"]) <= silver_images
