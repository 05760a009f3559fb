"""One chest X-ray JPEG -> its object crops and whole-image thumbnails, on the CPU (PIL + OpenCV).

Grain: one image (its JPEG path and its usable boxes in JPEG pixels) -> one crop per box, one thumbnail and
one texture map. No polars, DuckDB or torch: this module runs in the reader threads of ``vqa.stream`` and
in the out-of-process VQA worker, and ``vqa.decode`` (the torch path, CUDA when present) shares its geometry
rules (``draft_scale``, ``crop_bounds``), so both paths cut the same pixels.

Large images (real MIMIC-CXR is ~2500 px) are decoded at a reduced scale with PIL's JPEG draft mode (DCT
scaling by 1/2, 1/4, 1/8), chosen per image so the short side stays >= ``min_side``; box coordinates are
scaled to the decoded size, padded by ``pad`` of the box size, clipped, cropped and resized with area
averaging. A missing or unreadable JPEG raises ``ImageDecodeError`` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

GEOM_FEATURES = 6  # x1, y1, x2, y2, width, height of the box in 224 space, scaled to 0..1


class ImageDecodeError(RuntimeError):
    """A cohort JPEG that is missing or cannot be decoded."""


def host_threads() -> int:
    """Threads for decoding on this host's CPU when nothing else needs its cores: every core this process may
    run on but one, at least 2 (2 on the 2-core reference machine, 15 on the 16-core GPU machine)."""
    return max(2, len(os.sched_getaffinity(0)) - 1)


def spans(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``range(s, s + c)`` for each start ``s`` and count ``c``, concatenated (int64): the rows of some images'
    crops, image by image, when image i's are the ``counts[i]`` rows from ``starts[i]``."""
    counts = np.asarray(counts, np.int64)
    return np.repeat(np.asarray(starts, np.int64) - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))


def draft_scale(width: int, height: int, min_side: int) -> int:
    """The DCT scale (1, 2, 4 or 8) PIL's JPEG draft mode picks so the short side stays >= ``min_side``.

    PIL: requested size = floor(size * s) with s = min_side / short side; scale = the largest of 8, 4, 2, 1 not
    above min(width // requested width, height // requested height); decoded size = ceil(size / scale).
    """
    s = min(1.0, min_side / max(1, min(width, height)))
    if s >= 1.0:
        return 1
    fit = min(width // max(1, int(width * s)), height // max(1, int(height * s)))
    return next(f for f in (8, 4, 2, 1) if fit >= f)


def crop_bounds(boxes: np.ndarray, sx: float, sy: float, pad: float, width: int, height: int) -> np.ndarray:
    """(k, 4) int64 pixel bounds [c1, r1, c2, r2) of each box (JPEG pixels) on an image decoded at (sx, sy),
    padded by ``pad`` of the box size and clipped to the decoded ``width`` x ``height``."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = b[:, 0] * sx, b[:, 1] * sy, b[:, 2] * sx, b[:, 3] * sy
    px, py = pad * (x2 - x1), pad * (y2 - y1)
    return np.stack([np.maximum(0, np.floor(x1 - px)), np.maximum(0, np.floor(y1 - py)),
                     np.minimum(width, np.ceil(x2 + px)), np.minimum(height, np.ceil(y2 + py))], 1).astype(np.int64)


def _decode(path: Path, min_side: int) -> tuple[np.ndarray, float, float]:
    """Grayscale array at a reduced scale where the JPEG allows it, plus the x / y scale factors."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            w, h = im.size
            s = min(1.0, min_side / max(1, min(w, h)))
            if s < 1.0 and im.format == "JPEG":
                im.draft("L", (max(1, int(w * s)), max(1, int(h * s))))
            arr = np.asarray(im.convert("L"))
    except FileNotFoundError as exc:
        raise ImageDecodeError(f"JPEG not found: {path}") from exc
    except OSError as exc:  # PIL raises OSError / UnidentifiedImageError for truncated or non-image bytes
        raise ImageDecodeError(f"cannot decode JPEG {path}: {exc}") from exc
    return arr, arr.shape[1] / w, arr.shape[0] / h


def _crop_one(img: np.ndarray, bounds: np.ndarray, size: int) -> np.ndarray:
    c1, r1, c2, r2 = (int(v) for v in bounds)
    if c2 - c1 < 1 or r2 - r1 < 1:
        return np.zeros((size, size), np.uint8)
    patch = img[r1:r2, c1:c2]
    interp = cv2.INTER_AREA if patch.shape[0] >= size and patch.shape[1] >= size else cv2.INTER_LINEAR
    return cv2.resize(patch, (size, size), interpolation=interp)


def decode_one(path: Path, boxes: np.ndarray, crop_size: int, thumb_size: int, pad: float, min_side: int,
               on_missing: str = "raise") -> tuple[np.ndarray, np.ndarray] | None:
    """(2, thumb, thumb) uint8 thumbnail + texture and (k, crop, crop) uint8 crops of one JPEG.

    The texture channel is mean |image - Gaussian(1 px)| x 8, area-averaged to the thumbnail: what a small
    thumbnail averages away (e.g. the higher quantum noise of portable AP films). ``on_missing="report"``
    returns None for a missing or undecodable file instead of raising.
    """
    try:
        img, sx, sy = _decode(path, min_side)
    except ImageDecodeError:
        if on_missing == "report":
            return None
        raise
    thumb = cv2.resize(img, (thumb_size, thumb_size), interpolation=cv2.INTER_AREA)
    f = img.astype(np.float32)
    energy = cv2.resize(cv2.absdiff(f, cv2.GaussianBlur(f, (0, 0), 1.0)), (thumb_size, thumb_size),
                        interpolation=cv2.INTER_AREA)
    thumb = np.stack([thumb, np.clip(energy * 8.0 + 0.5, 0, 255).astype(np.uint8)])
    bounds = crop_bounds(boxes, sx, sy, pad, img.shape[1], img.shape[0])
    crops = (np.stack([_crop_one(img, b, crop_size) for b in bounds]) if len(bounds)
             else np.zeros((0, crop_size, crop_size), np.uint8))
    return thumb, crops
