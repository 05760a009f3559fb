"""Reference model building blocks: device resolution, crop decoding, AUROC, the network (no training here).

torch is imported in the tests that use it: importing it takes about 1.7 s, which every xdist worker would
pay to collect this file (make test-fast), also the one that runs none of them."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ehrxqa_pipeline.vqa import device as vdev
from ehrxqa_pipeline.vqa.auroc import pair_auroc
from ehrxqa_pipeline.vqa.images import ImageDecodeError, decode_crops, load_boxes
from resources.device import VqaDevice
from tests.vqa.held_out import auroc, within_pair_auroc


# --- device -------------------------------------------------------------------------------------------------

def test_resolve_device_cpu_and_auto():
    import torch

    assert vdev.resolve_device("cpu") == "cpu"
    assert vdev.resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown VQA device"):
        vdev.resolve_device("tpu")


def test_resolve_cuda_without_cuda_names_the_setting(monkeypatch, tmp_path):
    import torch

    from ehrxqa_pipeline.vqa.worker import run_task

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for req in ("cuda", "cuda:1"):
        with pytest.raises(ValueError) as err:
            vdev.resolve_device(req)
        assert "EHRXQA_VQA_DEVICE" in str(err.value) and "cpu" in str(err.value)
    monkeypatch.setenv("EHRXQA_VQA_DEVICE", "cuda")
    device = VqaDevice().requested()  # the resource reads the setting; the worker resolves it where it runs
    for task in ({"task": "train", "config": {"device": device}},
                 {"task": "predict", "device": device, "out": str(tmp_path / "out"), "shards": {}}):
        with pytest.raises(ValueError, match="EHRXQA_VQA_DEVICE"):
            run_task(task)


def test_autocast_is_a_noop_on_cpu():
    import torch

    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with vdev.autocast("cpu"):
        c = a @ b
    assert c.dtype == torch.float32 and torch.equal(c, a @ b)


# --- crops --------------------------------------------------------------------------------------------------

ROWS, COLS = 340, 320


def _mini_warehouse(tmp_path, findings_by_image: dict[str, list[tuple[str, str]]], drop=(), degenerate=(),
                    flat=()):
    """Render phantoms with the demo renderer (same seed, different findings) + the two tables decode needs."""
    import duckdb

    from ehrxqa_pipeline.demo.phantom import encode_jpeg, render_phantom, template_boxes

    boxes = template_boxes()
    rows, box_rows = [], []
    for image_id, findings in findings_by_image.items():
        rel = f"p10/p10000001/s50000001/{image_id}.jpg"
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_jpeg(render_phantom(ROWS, COLS, "PA", boxes, findings, seed=123)))
        rows.append({"image_id": image_id, "split": "test", "image_path": rel, "view_position": "PA",
                     "gender": "F", "ctr": 0.45, "mtr": 0.3})
        for name, (x1, y1, x2, y2) in boxes.items():
            if name in drop:
                continue
            sx, sy = COLS / 224.0, ROWS / 224.0
            ox2 = x1 * sx if name in degenerate else x2 * sx
            if name in flat:  # zero height in both spaces, as ingest keeps such detector boxes
                y2 = y1
            box_rows.append({"object_id": f"{image_id}_{name}", "bbox_name": name, "x1": x1, "y1": y1, "x2": x2,
                             "y2": y2, "original_x1": x1 * sx, "original_y1": y1 * sy, "original_x2": ox2,
                             "original_y2": y2 * sy})
    con = duckdb.connect()
    con.execute("CREATE SCHEMA splits; CREATE SCHEMA ingest")
    con.register("_images", pl.DataFrame(rows))
    con.register("_bbox", pl.DataFrame(box_rows))
    con.execute("CREATE TABLE splits.images AS SELECT * FROM _images")
    con.execute("CREATE TABLE ingest.silver_bbox AS SELECT * FROM _bbox")
    return con, [(r["image_id"], r["image_path"]) for r in rows]


def test_crops_shape_and_planted_finding_changes_only_its_region(tmp_path):
    con, items = _mini_warehouse(tmp_path, {"clean": [], "effusion": [("left lung", "pleural effusion")]})
    c = decode_crops(con, items, tmp_path, crop_size=32, thumb_size=64, workers=2)
    n = c.index.height
    assert c.crops.shape == (n, 32, 32) and c.crops.dtype == np.uint8
    assert c.thumbs.shape == c.texture.shape == (2, 64, 64) and c.geom.shape == (n, 6)
    assert n == 2 * len(load_boxes(con, ["clean"])) and c.image_ids == ["clean", "effusion"]
    assert (c.geom >= 0).all() and (c.geom <= 1).all()
    assert c.index["row"].to_list() == list(range(n)) and c.decode_seconds > 0

    def crop(image, obj):
        row = c.index.filter((pl.col("image_id") == image) & (pl.col("object") == obj))["row"].item()
        return c.crops[row].astype(np.float32)

    changed = np.abs(crop("effusion", "left lung") - crop("clean", "left lung")).mean()
    same = np.abs(crop("effusion", "right lung") - crop("clean", "right lung")).mean()
    assert changed > 8.0 and changed > 5 * same  # the meniscus whitens the lower left lung only


def test_missing_boxes_and_degenerate_boxes_are_skipped(tmp_path):
    con, items = _mini_warehouse(tmp_path, {"a": []}, drop=("carina",), degenerate=("svc",), flat=("trachea",))
    c = decode_crops(con, items, tmp_path)
    objects = set(c.index["object"])
    assert not {"carina", "svc", "trachea"} & objects and "left lung" in objects
    assert len(objects) == 33 and c.crops.shape[0] == 33


def test_missing_jpeg_raises_naming_the_file(tmp_path):
    con, items = _mini_warehouse(tmp_path, {"a": [], "b": []})
    gone = tmp_path / items[1][1]
    gone.unlink()
    with pytest.raises(ImageDecodeError, match=str(gone)):
        decode_crops(con, items, tmp_path)
    c = decode_crops(con, items, tmp_path, on_missing="report")
    assert c.missing == [str(gone)] and c.image_ids == ["a"] and set(c.index["image_id"]) == {"a"}


def test_corrupt_jpeg_raises_naming_the_file(tmp_path):
    con, items = _mini_warehouse(tmp_path, {"a": []})
    bad = tmp_path / items[0][1]
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(ImageDecodeError, match="cannot decode"):
        decode_crops(con, items, tmp_path)


def test_large_images_are_decoded_reduced_with_boxes_scaled(tmp_path):
    con, items = _mini_warehouse(tmp_path, {"a": [("left lung", "pleural effusion")]})
    full = decode_crops(con, items, tmp_path, min_side=4096)
    reduced = decode_crops(con, items, tmp_path, min_side=100)  # JPEG draft decodes at 1/2 (170 x 160)
    diff = np.abs(full.crops.astype(np.float32) - reduced.crops.astype(np.float32)).mean()
    assert diff < 12.0  # same regions, only resampled


# --- AUROC --------------------------------------------------------------------------------------------------

def _brute_auroc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    return ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (len(pos) * len(neg))


def test_auroc_matches_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.normal(size=300) + y * 0.8, 1)  # rounding makes ties
    assert auroc(y, s) == pytest.approx(_brute_auroc(y, s), abs=1e-12)
    assert auroc(np.zeros(5), np.arange(5)) != auroc(np.zeros(5), np.arange(5))  # NaN with one class
    assert auroc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0 and auroc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0


def test_pair_auroc_per_group_and_within_pair():
    rng = np.random.default_rng(1)
    n = 400
    f = pl.DataFrame({"object": rng.choice(["a", "b"], n), "attribute": rng.choice(["x", "y"], n),
                      "label": rng.integers(0, 2, n)}).with_columns(
        prob=pl.Series(np.round(rng.uniform(size=n), 2)).cast(pl.Float32))
    per = pair_auroc(f, min_positives=1)
    for o, a, value in per.select("object", "attribute", "auroc").iter_rows():
        g = f.filter((pl.col("object") == o) & (pl.col("attribute") == a))
        assert value == pytest.approx(_brute_auroc(g["label"].to_numpy(), g["prob"].to_numpy()), abs=1e-9)
    # a score that only knows each pair's prevalence ranks nothing within pairs
    prior = f.with_columns(prob=pl.col("label").mean().over("object", "attribute").cast(pl.Float32))
    assert within_pair_auroc(prior) == pytest.approx(0.5)


# --- network ------------------------------------------------------------------------------------------------

def test_model_shapes_prior_and_masked_loss():
    import torch

    from ehrxqa_pipeline.vqa.model import build_model, masked_bce

    torch.manual_seed(0)
    m = build_model(5, 7).eval()
    crops, obj, geom = torch.randn(9, 1, 32, 32), torch.randint(0, 5, (9,)), torch.rand(9, 6)
    assert m.forward_objects(crops, obj, geom).shape == (9, 7)
    assert m.forward_images(torch.randn(3, 2, 64, 64)).shape == (3, 2)
    assert m.forward_objects(torch.randn(4, 1, 24, 24), obj[:4], geom[:4]).shape == (4, 7)  # any crop size
    pos, n = np.zeros((5, 7)), np.full((5, 7), 100.0)
    pos[2, 3] = 50
    m.set_prior(np.stack([pos, n]))
    assert m.prior.weight[2, 3].item() == pytest.approx(0.0, abs=1e-6) and m.prior.weight[0, 0].item() < -4
    logits, target, mask = torch.randn(4, 7), torch.zeros(4, 7), torch.zeros(4, 7)
    mask[:, 0] = 1
    wild = logits.clone()
    wild[:, 1:] = 100.0  # masked entries must not change the loss
    assert masked_bce(logits, target, mask).item() == pytest.approx(masked_bce(wild, target, mask).item())


@pytest.mark.gpu
def test_gpu_step_and_inference_with_bf16_autocast():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from ehrxqa_pipeline.vqa.model import build_model

    dev = vdev.resolve_device("cuda")
    m = build_model(5, 7).to(dev)
    opt = torch.optim.AdamW(m.parameters(), 1e-3)
    x, o, g = torch.randn(64, 1, 32, 32, device=dev), torch.randint(0, 5, (64,), device=dev), torch.rand(64, 6,
                                                                                                       device=dev)
    with vdev.autocast(dev):
        loss = m.forward_objects(x, o, g).float().square().mean()
    loss.backward()
    opt.step()
    with torch.inference_mode(), vdev.autocast(dev):
        out = m.forward_objects(x, o, g)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()
