"""Phantom radiographs: format, determinism, and that every attribute shows in its own box."""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pytest
from PIL import Image

from ehrxqa_pipeline.demo.phantom import render_phantom, template_boxes, write_phantoms
from ehrxqa_pipeline.demo.phantom.boxes import resolve_boxes
from ehrxqa_pipeline.demo.phantom.motifs import CATEGORY_FALLBACK, MOTIFS, motif_for
from ehrxqa_pipeline.sources.schema import image_relpath

# One plausible object per attribute (where Chest ImaGenome reports it).
HOME: dict[str, str] = {
    "lung opacity": "left lower lung zone", "airspace opacity": "right lower lung zone",
    "consolidation": "left lower lung zone", "infiltration": "right mid lung zone",
    "atelectasis": "left lower lung zone", "linear/patchy atelectasis": "right lower lung zone",
    "lobar/segmental collapse": "left lower lung zone", "pulmonary edema/hazy opacity": "right lung",
    "vascular congestion": "right lung", "vascular redistribution": "left lung",
    "increased reticular markings/ild pattern": "right lung", "pleural effusion": "right lung",
    "costophrenic angle blunting": "left costophrenic angle", "pleural/parenchymal scarring": "right apical zone",
    "bronchiectasis": "left lower lung zone", "enlarged cardiac silhouette": "cardiac silhouette",
    "mediastinal displacement": "mediastinum", "mediastinal widening": "upper mediastinum",
    "enlarged hilum": "right hilar structures", "tortuous aorta": "aortic arch",
    "vascular calcification": "aortic arch", "pneumomediastinum": "mediastinum", "pneumothorax": "left lung",
    "hydropneumothorax": "right lung", "lung lesion": "right upper lung zone",
    "mass/nodule (not otherwise specified)": "left mid lung zone", "multiple masses/nodules": "right lung",
    "calcified nodule": "left upper lung zone", "superior mediastinal mass/enlargement": "upper mediastinum",
    "rib fracture": "left mid lung zone", "clavicle fracture": "right clavicle", "spinal fracture": "spine",
    "hyperaeration": "left lung", "cyst/bullae": "right upper lung zone",
    "elevated hemidiaphragm": "right hemidiaphragm", "diaphragmatic eventration (benign)": "left hemidiaphragm",
    "sub-diaphragmatic air": "right hemidiaphragm", "subcutaneous air": "right lung", "hernia": "mediastinum",
    "scoliosis": "spine", "spinal degenerative changes": "spine", "shoulder osteoarthritis": "right shoulder",
    "bone lesion": "left clavicle", "alveolar hemorrhage": "left lung", "aspiration": "right lower lung zone",
    "copd/emphysema": "left lung", "fluid overload/heart failure": "right lung", "goiter": "upper mediastinum",
    "granulomatous disease": "right upper lung zone", "interstitial lung disease": "left lung",
    "lung cancer": "left upper lung zone", "pericardial effusion": "cardiac silhouette",
    "pneumonia": "right lower lung zone", "artifact": "left mid lung zone",
    "breast/nipple shadows": "left lower lung zone", "low lung volumes": "right lung", "rotated": "spine",
    "skin fold": "right lung", "chest port": "svc", "chest tube": "left lung", "endotracheal tube": "trachea",
    "enteric tube": "abdomen", "ij line": "svc", "intra-aortic balloon pump": "descending aorta",
    "mediastinal drain": "mediastinum", "picc": "svc", "pigtail catheter": "right lower lung zone",
    "subclavian line": "svc", "swan-ganz catheter": "cardiac silhouette", "tracheostomy tube": "trachea",
    "cabg grafts": "mediastinum", "cardiac pacer and wires": "cardiac silhouette",
    "prosthetic valve": "cardiac silhouette", "aortic graft/repair": "descending aorta",
    "sternotomy wires": "mediastinum",
}
ROWS, COLS = 256, 240
# Grey-level |difference| between a render with one finding and the same seed without it, inside the
# finding's box: a diffuse change moves the box mean; a point-like one (a calcified nodule, a valve ring)
# moves the mean little but its strongest pixels a lot.
DIFFUSE_MEAN_MIN = 3.0  # mean inside the box
LOCAL_MEAN_MIN, LOCAL_PEAK_MIN = 0.6, 15.0  # mean, and mean of the strongest 2% of the box's pixels
OUT_MAX = 0.3  # mean outside the box (plus a 10% margin), for motifs that stay in their box


def _masks(obj: str, rows: int = ROWS, cols: int = COLS) -> tuple[np.ndarray, np.ndarray]:
    x1, y1, x2, y2 = resolve_boxes(template_boxes())[obj] * [cols / 224, rows / 224, cols / 224, rows / 224]
    inside = np.zeros((rows, cols), bool)
    inside[max(0, int(y1)):int(np.ceil(y2)), max(0, int(x1)):int(np.ceil(x2))] = True
    mx, my = 0.1 * (x2 - x1) + 3, 0.1 * (y2 - y1) + 3
    near = np.zeros((rows, cols), bool)
    near[max(0, int(y1 - my)):int(np.ceil(y2 + my)), max(0, int(x1 - mx)):int(np.ceil(x2 + mx))] = True
    return inside, ~near


def test_every_attribute_has_a_motif_and_a_home():
    assert len(MOTIFS) == 75 and set(HOME) == set(MOTIFS)
    assert set(CATEGORY_FALLBACK) == {"anatomicalfinding", "disease", "technicalassessment", "tubesandlines",
                                      "device"}
    assert motif_for("something new", "device") == CATEGORY_FALLBACK["device"]
    looks = {(m.kind, tuple(sorted(m.params.items()))) for m in MOTIFS.values()}
    assert len(looks) == len(MOTIFS)  # no two attributes share a look


def test_shape_dtype_and_not_blank():
    img = render_phantom(ROWS, COLS, "PA", template_boxes(), [], 7)
    assert img.shape == (ROWS, COLS) and img.dtype == np.uint8
    assert img.std() > 20
    lung = render_phantom(ROWS, COLS, "PA", template_boxes(), [], 7)[_masks("right lung")[0]].mean()
    spine = img[_masks("spine")[0]].mean()
    assert spine > lung + 30  # dark lungs, bright mediastinum


@pytest.mark.parametrize("seed", [11, 12])
def test_each_attribute_shows_in_its_box(seed):
    base = render_phantom(ROWS, COLS, "PA", template_boxes(), [], seed).astype(np.float32)
    failures = []
    for attr, obj in HOME.items():
        img = render_phantom(ROWS, COLS, "PA", template_boxes(), [(obj, attr)], seed).astype(np.float32)
        diff = np.abs(img - base)
        inside, outside = _masks(obj)
        d_in = np.sort(diff[inside])[::-1]
        mean, peak = d_in.mean(), d_in[:max(1, d_in.size // 50)].mean()
        if mean < DIFFUSE_MEAN_MIN and (mean < LOCAL_MEAN_MIN or peak < LOCAL_PEAK_MIN):
            failures.append(f"{attr} @ {obj}: inside mean {mean:.2f}, peak {peak:.1f}")
        if MOTIFS[attr].scope == "box" and diff[outside].mean() > OUT_MAX:
            failures.append(f"{attr} @ {obj}: outside {diff[outside].mean():.2f}")
    assert not failures, failures


def test_each_attribute_shows_at_other_objects():
    """Any (object, attribute) pair a label generator may produce still changes its box visibly."""
    seed = 5
    base = render_phantom(160, 160, "AP", template_boxes(), [], seed).astype(np.float32)
    objects = ["left lung", "right costophrenic angle", "cardiac silhouette", "spine", "trachea", "abdomen",
               "left hilar structures", "right breast"]
    weak = []
    for attr in MOTIFS:
        for obj in objects:
            img = render_phantom(160, 160, "AP", template_boxes(), [(obj, attr)], seed).astype(np.float32)
            d = np.sort(np.abs(img - base)[_masks(obj, 160, 160)[0]])[::-1]
            if d.mean() < 0.1 or d[:max(1, d.size // 50)].mean() < 5:
                weak.append((attr, obj))
    assert not weak, weak


def test_findings_are_order_independent_and_unknown_objects_skipped():
    f = [("left lung", "pleural effusion"), ("trachea", "endotracheal tube"), ("right lung", "pneumonia")]
    a = render_phantom(200, 200, "AP", template_boxes(), f, 3)
    b = render_phantom(200, 200, "AP", template_boxes(), f[::-1] + [f[0], ("unknown", "pneumonia")], 3)
    assert np.array_equal(a, b)


def test_missing_and_degenerate_boxes_still_render():
    boxes = {k: v for k, v in template_boxes().items() if "lung" not in k}
    boxes["spine"] = (100, 50, 100, 50)  # zero width
    boxes["trachea"] = (float("nan"), 1, 2, 3)
    img = render_phantom(120, 130, "PA", boxes, [("left lung", "pneumothorax"), ("spine", "scoliosis")], 1)
    assert img.shape == (120, 130)
    assert render_phantom(64, 64, "AP", {}, [("right lung", "pneumonia")], 1).shape == (64, 64)


def test_lateral_view_renders():
    lat = render_phantom(ROWS, COLS, "LATERAL", {}, [], 4)
    ll = render_phantom(ROWS, COLS, "LL", {}, [("left lung", "pneumonia")], 4)
    pa = render_phantom(ROWS, COLS, "PA", template_boxes(), [], 4)
    assert lat.shape == ll.shape == (ROWS, COLS) and lat.std() > 20
    assert np.abs(lat.astype(float) - pa).mean() > 10


def test_seed_and_view_change_the_image():
    a = render_phantom(128, 128, "PA", template_boxes(), [], 1)
    assert np.array_equal(a, render_phantom(128, 128, "PA", template_boxes(), [], 1))
    assert not np.array_equal(a, render_phantom(128, 128, "PA", template_boxes(), [], 2))
    assert not np.array_equal(a, render_phantom(128, 128, "AP", template_boxes(), [], 1))


def _frames(n: int = 18):
    rng = np.random.default_rng(0)
    images, boxes, findings = [], [], []
    attrs = list(MOTIFS)
    for i in range(n):
        dicom = f"{i:08x}-dcm{i}"
        view = ["PA", "AP", "LATERAL"][i % 3]
        images.append((10000000 + i * 7919, 50000000 + i, dicom, int(rng.integers(60, 90)), int(rng.integers(60, 90)),
                       view))
        if view != "LATERAL":
            for name, (x1, y1, x2, y2) in template_boxes().items():
                boxes.append((dicom, name, x1, y1, x2, y2))
            for attr in rng.choice(attrs, 3, replace=False):
                findings.append((dicom, HOME[attr], str(attr)))
    return (pl.DataFrame(images, schema=["subject_id", "study_id", "dicom_id", "Rows", "Columns", "ViewPosition"],
                         orient="row"),
            pl.DataFrame(boxes, schema=["dicom_id", "bbox_name", "x1", "y1", "x2", "y2"], orient="row"),
            pl.DataFrame(findings, schema=["dicom_id", "bbox_name", "label_name"], orient="row"))


def _read_all(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_write_phantoms_format_determinism_and_workers(tmp_path):
    images, boxes, findings = _frames()
    assert write_phantoms(tmp_path / "a", images, boxes, findings, seed=42, workers=1) == images.height
    assert write_phantoms(tmp_path / "b", images, boxes, findings, seed=42, workers=2) == images.height
    assert write_phantoms(tmp_path / "c", images.reverse(), boxes, findings.reverse(), seed=42, workers=1) == 18
    write_phantoms(tmp_path / "d", images, boxes, findings, seed=43, workers=1)
    a, b, c, d = (_read_all(tmp_path / x) for x in "abcd")
    assert a == b == c  # bytes independent of worker count and input order
    assert a.keys() == d.keys() and all(a[k] != d[k] for k in a)
    for sub, study, dicom, rows, cols, _ in images.iter_rows():
        data = a[image_relpath(sub, study, dicom)]
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG" and img.mode == "L" and img.size == (cols, rows)
        assert "exif" not in img.info and "progressive" not in img.info and "progression" not in img.info
    assert not list((tmp_path / "a").rglob("*.tmp"))
