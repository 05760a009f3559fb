"""Stream chest X-ray JPEGs into model-ready batches with bounded memory.

Grain: one ``Batch`` per ``batch_images`` consecutive images of the input list (fewer where files are
missing in ``report`` mode): their crops (one per box, image by image, in box order), thumbnails and
texture maps as uint8 tensors on the device.
Source: JPEG paths and each image's usable boxes in JPEG pixels (``vqa.images.box_table``).

Two decoders, one loop:
- ``cpu``: reader threads decode and crop (``vqa.jpeg.decode_one``: PIL draft mode + OpenCV, which release
  the GIL), the path the build uses on a machine without a GPU; the loop only stacks the results.
- ``torch``: reader threads only read the files' bytes; the loop decodes each batch with
  ``torchvision.io.decode_jpeg`` on the device (nvJPEG on CUDA, batched) and cuts crops there
  (``vqa.decode.cut``). On a machine without CUDA the same code runs on the CPU, which is how it is tested.

``workers`` threads read at most ``prefetch`` batches ahead of the one being used, so memory is flat in the
number of images. Threads, not DataLoader worker processes: a worker process must start (forkserver or
spawn: a fresh interpreter importing torch, 2.5 s per stream measured on the 2-core machine) or fork a
parent that holds DuckDB, OpenCV and Dagster threads, and it sends every image back through shared
memory; on the H200 machine (2026-11-27, 762 real-size JPEGs) 15 worker processes streamed 13 images/s
where reading in the calling process gave 444. ``workers=0`` reads in the calling thread. No polars, DuckDB
or Dagster here: the out-of-process VQA worker imports this module.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ehrxqa_pipeline.vqa.jpeg import ImageDecodeError, decode_one

DECODERS = ("cpu", "torch")


@dataclass
class Batch:
    """Decoded images ``rows`` (positions in the input list) and their model inputs on the device."""
    rows: np.ndarray  # (M,) int64
    crops: torch.Tensor  # (N, c, c) uint8
    crop_image: np.ndarray  # (N,) int64: the crop's image, 0..M-1 within this batch
    thumbs: torch.Tensor  # (M, t, t) uint8
    texture: torch.Tensor  # (M, t, t) uint8
    missing: list[str] = field(default_factory=list)
    decode_seconds: float = 0.0  # worker seconds (cpu), or main-process seconds (torch: on CUDA the kernels
    # run asynchronously, so this is the time to issue them; synchronize to time the device)


def resolve_decoder(decode: str, device: str) -> str:
    """``auto`` -> ``torch`` on CUDA (nvJPEG), ``cpu`` elsewhere; ``cpu`` and ``torch`` are honoured."""
    if decode == "auto":
        return "torch" if str(device).startswith("cuda") else "cpu"
    if decode not in DECODERS:
        raise ValueError(f"unknown JPEG decoder {decode!r}: use auto, cpu or torch")
    return decode


class _Images:
    """``read(k)`` = (k, payload, seconds); payload = the bytes (torch) or decode_one's output (cpu); None =
    missing (or undecodable, cpu) in ``report`` mode."""

    def __init__(self, paths: Sequence[Path], boxes: Sequence[np.ndarray], decoder: str, crop_size: int,
                 thumb_size: int, pad: float, min_side: int, on_missing: str):
        self.paths, self.boxes, self.decoder, self.on_missing = list(paths), list(boxes), decoder, on_missing
        self.args = (crop_size, thumb_size, pad, min_side)

    def read(self, k: int):
        from ehrxqa_pipeline.vqa.decode import read_jpeg

        t0 = time.perf_counter()
        if self.decoder == "cpu":
            out = decode_one(self.paths[k], self.boxes[k], *self.args, on_missing=self.on_missing)
        else:
            try:
                out = read_jpeg(self.paths[k])
            except ImageDecodeError:
                if self.on_missing != "report":
                    raise
                out = None
        return k, out, time.perf_counter() - t0

    def crop_image(self, rows: np.ndarray) -> np.ndarray:
        """Each crop's image within a batch of images ``rows`` (crops come image by image, in box order)."""
        return np.repeat(np.arange(len(rows)), [len(self.boxes[k]) for k in rows]).astype(np.int64)


def _read_ahead(read, n: int, batch: int, workers: int, prefetch: int) -> Iterator[list]:
    """``[read(k) for k in batch]`` for consecutive batches of range(n), read by ``workers`` threads at most
    ``prefetch`` batches ahead (``workers=0``: in the calling thread, one batch at a time)."""
    starts = range(0, n, batch)
    if workers <= 0:
        for s in starts:
            yield [read(k) for k in range(s, min(n, s + batch))]
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        todo = iter(starts)
        for s in todo:
            pending.append([pool.submit(read, k) for k in range(s, min(n, s + batch))])
            if len(pending) > prefetch:
                break
        while pending:
            futures = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append([pool.submit(read, k) for k in range(nxt, min(n, nxt + batch))])
            try:
                yield [f.result() for f in futures]
            except BaseException:
                for later in pending:
                    for f in later:
                        f.cancel()
                raise


def stream(paths: Sequence[Path], boxes: Sequence[np.ndarray], device: str = "cpu", decode: str = "auto",
           batch_images: int = 256, workers: int = 2, prefetch: int = 2, crop_size: int = 32, thumb_size: int = 64,
           pad: float = 0.05, min_side: int = 512, on_missing: str = "raise") -> Iterator[Batch]:
    """Batches of ``paths`` (with ``boxes[i]``: (k_i, 4) JPEG-pixel boxes) in input order; see the module doc.

    A missing or undecodable JPEG raises ``ImageDecodeError`` naming it, or with ``on_missing="report"`` is
    left out of its batch and listed in ``Batch.missing``.
    """
    from ehrxqa_pipeline.vqa.decode import cut, decode_gray

    if on_missing not in ("raise", "report"):
        raise ValueError(f"on_missing must be 'raise' or 'report', not {on_missing!r}")
    if len(paths) != len(boxes):
        raise ValueError(f"stream: {len(paths)} paths but {len(boxes)} box arrays")
    decoder = resolve_decoder(decode, device)
    data = _Images(paths, boxes, decoder, crop_size, thumb_size, pad, min_side, on_missing)
    for items in _read_ahead(data.read, len(data.paths), max(1, batch_images), workers, max(1, prefetch)):
        missing = [str(data.paths[k]) for k, out, _ in items if out is None]
        kept = [(k, out, s) for k, out, s in items if out is not None]
        seconds = float(sum(s for _, _, s in kept))
        if decoder == "cpu":
            rows = np.array([k for k, _, _ in kept], np.int64)
            thumbs = np.stack([o[0] for _, o, _ in kept]) if kept else np.zeros((0, 2, thumb_size, thumb_size),
                                                                                   np.uint8)
            crops = np.concatenate([o[1] for _, o, _ in kept] or [np.zeros((0, crop_size, crop_size), np.uint8)])
            t = torch.from_numpy(thumbs).to(device)
            yield Batch(rows, torch.from_numpy(crops).to(device), data.crop_image(rows), t[:, 0], t[:, 1], missing,
                        seconds)
            continue
        t0 = time.perf_counter()
        decoded = decode_gray([o for _, o, _ in kept], device, [str(data.paths[k]) for k, _, _ in kept],
                              skip_bad=on_missing == "report")
        missing += [str(data.paths[k]) for (k, _, _), img in zip(kept, decoded) if img is None]
        rows = np.array([k for (k, _, _), img in zip(kept, decoded) if img is not None], np.int64)
        crops, thumbs, texture = cut([img for img in decoded if img is not None], [data.boxes[k] for k in rows],
                                     crop_size, thumb_size, pad, min_side)
        yield Batch(rows, crops, data.crop_image(rows), thumbs, texture, missing, seconds + time.perf_counter() - t0)
