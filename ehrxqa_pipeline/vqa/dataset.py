"""Training / evaluation arrays of the reference model: vocabularies, image lists, crops and label matrices.

Grain: ``Vocab`` = the label pool (``cxr_labels.pairs``: object x attribute); ``Arrays`` = one row per
(image, object) crop with a usable box (targets over the attribute vocabulary), plus one row per image
(thumbnail, view position, sex).
Sources: ``splits.images`` (split, view_position, gender, image_path), ``cxr_labels.silver`` /
``cxr_labels.gold`` (sparse positives; every other pool pair of a labelled object is a negative),
``ingest.silver_bbox`` via ``vqa.images``. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from ehrxqa_pipeline.vqa.images import Crops, decode_crops


@dataclass(frozen=True)
class Vocab:
    """Objects and attributes (sorted) and ``pool[o, a]`` = (object o, attribute a) is in the label pool."""
    objects: tuple[str, ...]
    attributes: tuple[str, ...]
    pool: np.ndarray  # (n_objects, n_attributes) bool

    def pairs(self) -> pl.DataFrame:
        o, a = np.nonzero(self.pool)
        return pl.DataFrame({"object": [self.objects[i] for i in o], "attribute": [self.attributes[j] for j in a]},
                            schema={"object": pl.String, "attribute": pl.String})

    def to_dict(self) -> dict:
        return {"objects": list(self.objects), "attributes": list(self.attributes),
                "pool": [[int(i), int(j)] for i, j in zip(*np.nonzero(self.pool))]}

    @classmethod
    def from_dict(cls, d: dict) -> Vocab:
        pool = np.zeros((len(d["objects"]), len(d["attributes"])), bool)
        for i, j in d["pool"]:
            pool[i, j] = True
        return cls(tuple(d["objects"]), tuple(d["attributes"]), pool)


def load_vocab(con) -> Vocab:
    pairs = con.sql("SELECT DISTINCT object, attribute FROM cxr_labels.pairs").pl()
    if pairs.height == 0:
        raise ValueError("cxr_labels.pairs is empty: build the cxr_labels stage first")
    objects, attributes = sorted(pairs["object"].unique()), sorted(pairs["attribute"].unique())
    o = pairs["object"].replace_strict(objects, range(len(objects))).to_numpy()
    a = pairs["attribute"].replace_strict(attributes, range(len(attributes))).to_numpy()
    pool = np.zeros((len(objects), len(attributes)), bool)
    pool[o, a] = True
    return Vocab(tuple(objects), tuple(attributes), pool)


def select_images(con, split: str | None = None, image_ids: list[str] | None = None,
                  max_images: int | None = None) -> pl.DataFrame:
    """image_id, image_path, view_position, gender of one split (or the given ids), sorted by image_id.

    ``max_images`` keeps the first N after sorting by a hash of image_id: a fixed, split-wide sample.
    """
    where = "split = ?" if image_ids is None else "image_id IN (SELECT unnest(?::VARCHAR[]))"
    frame = con.execute(f"""
        SELECT image_id, image_path, view_position, gender FROM splits.images WHERE {where}
        ORDER BY hash(image_id), image_id {"" if max_images is None else f"LIMIT {int(max_images)}"}""",
                        [split if image_ids is None else list(image_ids)]).pl()
    return frame.sort("image_id")


@dataclass
class Arrays:
    """Model inputs for a set of images (numpy; torch conversion happens per batch)."""
    crops: Crops
    obj: np.ndarray  # (N,) int64 object index per crop
    target: np.ndarray | None  # (N, n_attributes) uint8, None when no labels were asked for
    view_pa: np.ndarray  # (M,) float32: 1 = PA, 0 = AP
    male: np.ndarray  # (M,) float32: 1 = M, 0 = F (NaN when unknown)
    n_positive: int = 0

    @property
    def n_images(self) -> int:
        return len(self.crops.image_ids)


def build_arrays(con, images: pl.DataFrame, files_root: Path, vocab: Vocab, labels: str | None,
                 crop_size: int, thumb_size: int, workers: int, on_missing: str = "raise",
                 store: Path | None = None, device: str = "cpu", decode: str = "cpu") -> Arrays:
    """Decode ``images`` (from select_images) and attach targets from ``labels`` ('silver'|'gold'|None).

    ``store``: a folder for the pixel and target arrays, memory-mapped; ``device``, ``decode``: where and how the
    JPEGs are decoded (``vqa.images.decode_crops``)."""
    crops = decode_crops(con, list(zip(images["image_id"], images["image_path"])), files_root,
                         crop_size=crop_size, thumb_size=thumb_size, workers=workers, on_missing=on_missing,
                         objects=list(vocab.objects), store=store, device=device, decode=decode)
    idx = crops.index
    obj = idx["object"].replace_strict(list(vocab.objects), range(len(vocab.objects)),
                                       return_dtype=pl.Int64).to_numpy(writable=True)
    target, n_pos = None, 0
    if labels is not None:
        if labels not in ("silver", "gold"):
            raise ValueError(f"labels must be 'silver', 'gold' or None, not {labels!r}")
        con.register("_vqa_idx", idx.select("image_id", "object", "row").to_arrow())
        try:
            pos = con.sql(f"""
                SELECT x.row, l.attribute FROM _vqa_idx x
                JOIN cxr_labels.{labels} l USING (image_id, object)
                JOIN cxr_labels.pairs p USING (object, attribute)""").pl()
        finally:
            con.unregister("_vqa_idx")
        shape = (idx.height, len(vocab.attributes))
        if store is None:
            target = np.zeros(shape, np.uint8)
        else:
            from numpy.lib.format import open_memmap

            target = open_memmap(Path(store) / "target.npy", "w+", np.uint8, shape)  # zero-filled
        att = pos["attribute"].replace_strict(list(vocab.attributes), range(len(vocab.attributes)),
                                              return_dtype=pl.Int64).to_numpy()
        target[pos["row"].to_numpy(), att] = 1
        n_pos = int(target.sum())
    meta = pl.DataFrame({"image_id": crops.image_ids}, schema={"image_id": pl.String}).join(
        images, on="image_id", how="left", maintain_order="left")
    view = (meta["view_position"] == "PA").cast(pl.Float32).to_numpy()
    male = pl.when(meta["gender"] == "M").then(1.0).when(meta["gender"] == "F").then(0.0).otherwise(None)
    male = meta.select(male.cast(pl.Float32)).to_series().fill_null(float("nan")).to_numpy()
    return Arrays(crops, obj, target, view, male, n_pos)


def prevalence(arrays: Arrays, vocab: Vocab) -> np.ndarray:
    """(2, n_objects, n_attributes): positives and labelled crops per pool pair (0 outside the pool)."""
    n_obj = len(vocab.objects)
    pos = np.stack([arrays.target[arrays.obj == o].sum(0, dtype=np.float64) for o in range(n_obj)])
    n = np.bincount(arrays.obj, minlength=n_obj).astype(np.float64)[:, None] * vocab.pool
    return np.stack([pos * vocab.pool, n])
