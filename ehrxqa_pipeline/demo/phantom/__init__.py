"""Phantom radiographs: deterministic synthetic chest X-rays for the demo source.

Each image is drawn from its Chest ImaGenome boxes (anatomy where the boxes say) and its affirmed findings
(one motif per attribute, drawn in that object's box; see phantom.motifs), then blurred, given a random
contrast/brightness and Gaussian + signal-dependent noise, and written as a baseline grayscale JPEG.
Randomness is split into independent streams (anatomy, each finding, noise), so a finding changes only
its own region and the bytes of one image never depend on any other image, worker count or order.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from io import BytesIO
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
from PIL import Image

from ehrxqa_pipeline.demo.phantom.anatomy import Canvas, blur, draw_frontal
from ehrxqa_pipeline.demo.phantom.boxes import TEMPLATE_BOXES, resolve_boxes
from ehrxqa_pipeline.demo.phantom.lateral import draw_lateral
from ehrxqa_pipeline.demo.phantom.motifs import draw_findings
from ehrxqa_pipeline.rng import generator, step_seed
from ehrxqa_pipeline.sources.schema import image_relpath

if TYPE_CHECKING:
    import polars as pl

JPEG_QUALITY = 90
_LATERAL_VIEWS = {"LATERAL", "LL", "RL", "XTABLE LATERAL", "LAO", "RAO", "LPO", "RPO", "SWIMMERS"}

__all__ = ["JPEG_QUALITY", "TEMPLATE_BOXES", "encode_jpeg", "is_lateral", "render_phantom", "template_boxes",
           "write_phantoms"]


def template_boxes() -> dict[str, tuple[float, float, float, float]]:
    """The 36 boxes of a normal PA chest in 224 space (what the renderer assumes for missing boxes)."""
    return dict(TEMPLATE_BOXES)


def is_lateral(view: str | None) -> bool:
    v = (view or "").strip().upper()
    return v in _LATERAL_VIEWS or "LAT" in v


def render_phantom(rows: int, columns: int, view: str, boxes: dict[str, tuple[float, float, float, float]],
                   findings: Iterable[tuple[str, str]], seed: int) -> np.ndarray:
    """One phantom radiograph as a (rows, columns) uint8 array.

    ``boxes`` are (x1, y1, x2, y2) in 224 x 224 space (missing ones are fitted from the template);
    ``findings`` are affirmed (object, attribute) pairs, each drawn in that object's box (devices and tubes
    along a path through it). Lateral views ignore boxes and findings (Chest ImaGenome labels frontal
    images only) and show a generic lateral chest.
    """
    rows, columns = int(rows), int(columns)
    lateral = is_lateral(view)
    ap = (view or "").strip().upper() == "AP"
    c = Canvas(rows, columns, resolve_boxes(boxes or {}), view)
    anatomy = generator(seed, "anatomy")
    if lateral:
        draw_lateral(c, anatomy)
    else:
        draw_frontal(c, anatomy, ap)
        draw_findings(c, findings, seed)
    c.d += blur(c.metal.astype(np.float32), 0.7 * c.px) * (0.42 / 255)
    return _expose(c, generator(seed, "exposure"), ap)


def _expose(c: Canvas, rng: np.random.Generator, ap: bool) -> np.ndarray:
    """Detector blur, random window (contrast, brightness, gamma) and Gaussian + Poisson-like noise."""
    contrast, bright = rng.uniform(0.9, 1.15), rng.uniform(-0.05, 0.05)
    gamma = rng.uniform(0.8, 1.15)
    quantum, read = rng.uniform(0.0006, 0.0016) * (1.6 if ap else 1.0), rng.uniform(0.004, 0.01)
    img = blur(c.d, rng.uniform(0.5, 0.9) * c.px)
    img = np.clip((img * 1.05 + 0.02 - 0.5) * contrast + 0.5 + bright, 0.0, 1.0)
    img = cv2.pow(img, gamma)
    # unit-variance triangular noise from two uniform bytes: 4x cheaper than normal draws, looks the same
    raw = np.frombuffer(rng.bytes(2 * img.size), np.uint8).reshape(2, *img.shape)
    noise = (raw[0].astype(np.float32) + raw[1] - 255.0) * (1 / 104.5)
    img += noise * np.sqrt(img * quantum + read * read)
    return cv2.convertScaleAbs(np.clip(img, 0, 1), alpha=255.0)


def encode_jpeg(img: np.ndarray) -> bytes:
    """Baseline grayscale JPEG with fixed settings and no metadata: same array, same bytes."""
    buf = BytesIO()
    Image.fromarray(np.ascontiguousarray(img, np.uint8)).save(buf, format="JPEG", quality=JPEG_QUALITY,
                                                              optimize=False, progressive=False)
    return buf.getvalue()


def _render_job(job: tuple) -> tuple[str, bytes]:
    relpath, rows, columns, view, boxes, findings, seed = job
    return relpath, encode_jpeg(render_phantom(rows, columns, view, boxes, findings, seed))


def _write_chunk(files_dir: str, jobs: list[tuple]) -> int:
    for job in jobs:
        relpath, data = _render_job(job)
        path = Path(files_dir) / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: a reader never sees half an image
    return len(jobs)


def _init_worker() -> None:
    cv2.setNumThreads(1)


def _jobs(images: pl.DataFrame, boxes: pl.DataFrame, findings: pl.DataFrame, seed: int) -> list[tuple]:
    import polars as pl

    box_map: dict[str, dict] = {}
    if boxes.height:
        grouped = boxes.group_by("dicom_id").agg("bbox_name", "x1", "y1", "x2", "y2")
        for d, names, *coords in grouped.iter_rows():
            box_map[d] = {n: tuple(map(float, b)) for n, *b in zip(names, *coords)
                          if None not in b}
    find_map: dict[str, list] = {}
    if findings.height:
        grouped = findings.group_by("dicom_id").agg(pl.concat_list("bbox_name", "label_name").alias("f"))
        for d, pairs in grouped.iter_rows():
            find_map[d] = sorted({(a, b) for a, b in pairs if a is not None and b is not None})
    jobs = []
    for sub, study, dicom, rows, cols, view in images.select(
            "subject_id", "study_id", "dicom_id", "Rows", "Columns", "ViewPosition").iter_rows():
        jobs.append((image_relpath(sub, study, dicom), rows, cols, view, box_map.get(dicom, {}),
                     find_map.get(dicom, []), step_seed(seed, "phantom:" + dicom)))
    return jobs


def write_phantoms(files_dir: Path, images: pl.DataFrame, boxes: pl.DataFrame, findings: pl.DataFrame,
                   seed: int, workers: int = 2) -> int:
    """Write one phantom JPEG per row of ``images`` to ``files_dir / image_relpath(...)``; return the count.

    ``images``: subject_id, study_id, dicom_id, Rows, Columns, ViewPosition; ``boxes``: dicom_id,
    bbox_name, x1, y1, x2, y2 (224 space); ``findings``: dicom_id, bbox_name, label_name (affirmed only).
    The image seed is ``step_seed(seed, "phantom:" + dicom_id)``, so the bytes do not depend on workers.
    ``workers`` > 1 renders in a spawned process pool (a calling script needs the usual
    ``if __name__ == "__main__":`` guard); each file is written to a temporary name and renamed.
    """
    jobs = _jobs(images, boxes, findings, seed)
    files_dir = str(files_dir)
    if workers <= 1 or len(jobs) < 16:
        return _write_chunk(files_dir, jobs)
    size = max(8, min(64, len(jobs) // (workers * 4) + 1))
    chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker) as pool:
        return sum(pool.map(_write_chunk, [files_dir] * len(chunks), chunks))
