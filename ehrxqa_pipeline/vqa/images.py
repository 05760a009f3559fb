"""Decode chest X-ray JPEGs into fixed-size object crops and whole-image thumbnails for the reference model.

Grain: one crop per (image, object) with a usable Chest ImaGenome box, one thumbnail per image.
Sources: ``splits.images`` (image_path, relative to the MIMIC-CXR-JPG ``files`` root) and
``ingest.silver_bbox`` (the 36 detector boxes per image, pixel coordinates ``original_*`` of the JPEG and
224-space ``x1..y2``); the JPEG bytes under ``files_root``.

Decoding runs in a thread pool (PIL releases the GIL while decoding and cv2 while resizing), one image at a
time by ``vqa.jpeg.decode_one`` (draft-mode reduction, box padding, area resizing; the torch path is
``vqa.decode``). A missing or unreadable JPEG is an error (the cohort stage already quarantines corrupt
JPEGs), raised as ``ImageDecodeError`` naming the file, unless ``on_missing="report"``, which skips the image
and lists it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import polars as pl

from ehrxqa_pipeline.vqa.jpeg import GEOM_FEATURES, ImageDecodeError, decode_one, spans

__all__ = ["GEOM_FEATURES", "Crops", "ImageDecodeError", "box_table", "decode_crops", "load_boxes"]


@dataclass
class Crops:
    """Decoded inputs for a list of images (row order = ``index``).

    ``crops``: (n_objects_total, crop, crop) uint8; ``geom``: (n_objects_total, 6) float32 box geometry;
    ``thumbs``: (n_images, thumb, thumb) uint8; ``texture``: (n_images, thumb, thumb) uint8 local noise /
    edge energy (mean |image - Gaussian(1 px)| x 8, area-averaged to the thumbnail: what a 64 px thumbnail
    averages away, e.g. the higher quantum noise of portable AP films); ``index``: image_id, object, row (into crops),
    image_row (into thumbs); ``image_ids``: thumb order; ``missing``: images skipped (report mode).
    """
    crops: np.ndarray
    geom: np.ndarray
    thumbs: np.ndarray
    texture: np.ndarray
    index: pl.DataFrame
    image_ids: list[str]
    missing: list[str] = field(default_factory=list)
    decode_seconds: float = 0.0


def load_boxes(con, image_ids: list[str] | None = None, objects: list[str] | None = None) -> pl.DataFrame:
    """Usable boxes (image_id, object, ox1..oy2 in JPEG pixels, x1..y2 in 224 space) of the given images.

    Rows with a NULL coordinate or an empty / inverted box are dropped: the object is skipped on that image
    (no crop, so no prediction for it). Ingestion keeps the detector's zero-area boxes (width or height 0;
    they count in the cohort's 36-box rule), so this is where they leave: nothing can be cropped from them.
    """
    ids = pl.DataFrame({"image_id": image_ids or []}, schema={"image_id": pl.String})
    con.register("_vqa_box_ids", ids.to_arrow())
    try:
        frame = con.sql(f"""
            WITH b AS (
                SELECT left(object_id, length(object_id) - length(bbox_name) - 1) AS image_id, *
                FROM ingest.silver_bbox)
            SELECT i.image_id, b.bbox_name AS object,
                   b.original_x1 AS ox1, b.original_y1 AS oy1, b.original_x2 AS ox2, b.original_y2 AS oy2,
                   b.x1, b.y1, b.x2, b.y2
            FROM splits.images i
            JOIN b ON b.image_id = i.image_id
            WHERE {"i.image_id IN (SELECT image_id FROM _vqa_box_ids)" if image_ids is not None else "TRUE"}
              AND b.original_x2 - b.original_x1 >= 2 AND b.original_y2 - b.original_y1 >= 2
              AND b.x2 > b.x1 AND b.y2 > b.y1
            ORDER BY i.image_id, object""").pl()
    finally:
        con.unregister("_vqa_box_ids")
    if objects is not None:
        frame = frame.filter(pl.col("object").is_in(objects))
    return frame


def _ranges(sorted_ids: np.ndarray, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """First box row and box count of each of ``ids`` in the image_id-sorted box table (0, 0 if none)."""
    uniq, start, count = np.unique(sorted_ids, return_index=True, return_counts=True)
    if len(uniq) == 0:
        return np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    pos = {u: k for k, u in enumerate(uniq.tolist())}
    at = np.array([pos.get(i, -1) for i in ids], np.int64)
    ok = at >= 0
    return np.where(ok, start[np.maximum(at, 0)], 0).astype(np.int64), np.where(ok, count[np.maximum(at, 0)], 0)


def box_table(con, image_ids: list[str], objects: list[str] | None = None):
    """The usable boxes of ``image_ids`` (``load_boxes``, sorted by image_id, object) and, per image in the
    given order, its first box row and box count; plus every box's JPEG-pixel coordinates (n, 4) float64
    and model geometry (n, 6) float32: x1, y1, x2, y2, width, height in 224 space scaled to 0..1."""
    boxes = load_boxes(con, image_ids, objects)
    first, counts = _ranges(boxes["image_id"].to_numpy(), image_ids)
    coords = boxes.select("ox1", "oy1", "ox2", "oy2").to_numpy().astype(np.float64)
    g = boxes.select("x1", "y1", "x2", "y2").to_numpy().astype(np.float64) / 224.0
    geom = np.concatenate([g, g[:, 2:3] - g[:, 0:1], g[:, 3:4] - g[:, 1:2]], axis=1).astype(np.float32)
    return boxes, first, counts, coords, geom


def decode_crops(con, images: list[tuple[str, str]], files_root: Path, crop_size: int = 32,
                 thumb_size: int = 64, workers: int = 2, pad: float = 0.05, min_side: int = 512,
                 on_missing: str = "raise", objects: list[str] | None = None, store: Path | None = None,
                 chunk_images: int = 1024, device: str = "cpu", decode: str = "cpu") -> Crops:
    """Crops and thumbnails for ``images`` = [(image_id, image_path relative to files_root), ...].

    ``on_missing``: ``raise`` (default) -> ImageDecodeError naming the file; ``report`` -> the image is
    skipped and listed in ``Crops.missing``. ``objects`` restricts the crops to that vocabulary.
    ``store``: a folder where the pixel arrays are written as ``.npy`` files, ``chunk_images`` images at a time,
    and returned memory-mapped, so memory stays flat in the number of images (the reference model's training
    set: ~1 KiB per crop, 36 crops per image, 8.7 GB for MIMIC-CXR's 242k silver images); same values as in
    memory. A store needs ``on_missing="raise"`` (its rows are laid out before decoding).
    ``decode`` other than ``cpu`` on ``device`` (``vqa.stream.parse_decoder``; ``auto`` is nvJPEG on CUDA): the
    images go through ``vqa.stream`` instead, ``chunk_images`` a batch, decoded on the device (a share in the
    reader threads with ``mixed``), and come back to the host batch by batch.
    """
    from ehrxqa_pipeline.vqa.stream import parse_decoder

    if on_missing not in ("raise", "report"):
        raise ValueError(f"on_missing must be 'raise' or 'report', not {on_missing!r}")
    if store is not None and on_missing != "raise":
        raise ValueError("decode_crops: a crop store needs on_missing='raise'")
    ids = [i for i, _ in images]
    boxes, first, counts, coords, geom = box_table(con, ids, objects)
    root = Path(files_root)
    jobs = [(root / p, coords[f:f + c]) for (_, p), f, c in zip(images, first, counts)]
    shape = (crop_size, thumb_size, pad, min_side)
    t0 = time.perf_counter()
    if parse_decoder(decode, device)[0] != "cpu":
        batches = _streamed(jobs, chunk_images, device, decode, workers, shape, on_missing)
    else:
        batches = _threaded(jobs, chunk_images, workers, shape, on_missing)
    pixels, keep, missing = _collect(batches, store, counts, crop_size, thumb_size)
    decode_seconds = time.perf_counter() - t0
    kc = counts[keep]
    total = int(kc.sum())
    rows = spans(first[keep], kc)  # box row per crop
    index = boxes.select("image_id", "object")[rows].with_columns(
        row=pl.Series(np.arange(total, dtype=np.int64)), image_row=pl.Series(np.repeat(np.arange(len(keep)), kc)))
    return Crops(crops=pixels[0], geom=geom[rows], thumbs=pixels[1], texture=pixels[2], index=index,
                 image_ids=[ids[k] for k in keep], missing=missing, decode_seconds=decode_seconds)


_HANDED = 64  # images per batch ``_threaded`` hands on from a decoded chunk


def _threaded(jobs, chunk_images: int, workers: int, shape: tuple, on_missing: str):
    """Batches (rows, crops, thumbnails, texture, missing files) of ``jobs``, ``chunk_images`` at a time, each image
    decoded by ``vqa.jpeg.decode_one`` in ``workers`` threads."""
    crop_size, thumb_size, pad, min_side = shape

    def work(job):
        return decode_one(*job, crop_size, thumb_size, pad, min_side, on_missing)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        for s in range(0, len(jobs), max(1, chunk_images)):
            results = pool.map(work, jobs[s:s + chunk_images])  # each image's result freed once handed on
            for t in range(s, min(len(jobs), s + chunk_images), _HANDED):  # joining a few copies little at once
                part = list(islice(results, _HANDED))
                got = [r for r in part if r is not None]
                both = np.stack([r[0] for r in got]) if got else np.zeros((0, 2, thumb_size, thumb_size), np.uint8)
                yield (np.array([k for k, r in enumerate(part, t) if r is not None], np.int64),
                       np.concatenate([r[1] for r in got] or [np.zeros((0, crop_size, crop_size), np.uint8)]),
                       both[:, 0], both[:, 1], [str(jobs[k][0]) for k, r in enumerate(part, t) if r is None])


def _streamed(jobs, chunk_images: int, device: str, decode: str, workers: int, shape: tuple, on_missing: str):
    """Batches (rows, crops, thumbnails, texture, missing files) of ``jobs`` through ``vqa.stream``,
    ``chunk_images`` images a batch, copied to the host."""
    from ehrxqa_pipeline.vqa.stream import stream

    crop_size, thumb_size, pad, min_side = shape
    for b in stream([p for p, _ in jobs], [c for _, c in jobs], device, decode, max(1, chunk_images), workers,
                    crop_size=crop_size, thumb_size=thumb_size, pad=pad, min_side=min_side, on_missing=on_missing):
        yield (b.rows, *(t.cpu().numpy() for t in (b.crops, b.thumbs, b.texture)), b.missing)


def _collect(batches, store: Path | None, counts: np.ndarray, crop_size: int, thumb_size: int
             ) -> tuple[tuple, np.ndarray, list[str]]:
    """(crops, thumbnails, texture), the kept images and the missing files of ``batches`` (``_threaded``,
    ``_streamed``): written batch by batch into the store's memory-mapped ``.npy`` files (one batch of decoded
    images in memory at a time), or joined in memory."""
    arrays = None
    if store is not None:
        from numpy.lib.format import open_memmap

        Path(store).mkdir(parents=True, exist_ok=True)
        arrays = (open_memmap(Path(store) / "crops.npy", "w+", np.uint8, (int(counts.sum()), crop_size, crop_size)),
                  *(open_memmap(Path(store) / f"{name}.npy", "w+", np.uint8, (len(counts), thumb_size, thumb_size))
                    for name in ("thumbs", "texture")))
    at = np.cumsum(counts) - counts  # where each image's crops begin
    parts, keep, missing = [], [], []
    for rows, crops, thumbs, texture, gone in batches:
        keep.append(rows)
        missing += gone
        if arrays is None:
            parts.append((crops, thumbs, texture))
            continue
        arrays[0][spans(at[rows], counts[rows])] = crops
        arrays[1][rows], arrays[2][rows] = thumbs, texture
    kept = np.concatenate(keep) if keep else np.zeros(0, np.int64)
    if arrays is not None:
        for a in arrays:
            a.flush()
        return arrays, kept, missing
    none = (np.zeros((0, crop_size, crop_size), np.uint8), np.zeros((0, thumb_size, thumb_size), np.uint8))
    return tuple(np.concatenate([p[i] for p in parts] or [none[min(i, 1)]]) for i in range(3)), kept, missing
