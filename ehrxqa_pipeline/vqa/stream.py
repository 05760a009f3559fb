"""Stream chest X-ray JPEGs into model-ready batches with bounded memory.

Grain: one ``Batch`` per ``batch_images`` consecutive images of the input list (fewer where files are
missing in ``report`` mode): their crops (one per box, image by image, in box order), thumbnails and
texture maps as uint8 tensors on the device.
Source: JPEG paths and each image's usable boxes in JPEG pixels (``vqa.images.box_table``).

Three decoders, one loop:
- ``cpu``: reader threads decode and crop (``vqa.jpeg.decode_one``: PIL draft mode + OpenCV, which release
  the GIL), the path the build uses on a machine without a GPU; the loop only stacks the results.
- ``torch``: reader threads only read the files' bytes; the loop decodes each batch with
  ``torchvision.io.decode_jpeg`` on the device (nvJPEG on CUDA, batched) and cuts crops there
  (``vqa.decode.cut``). On a machine without CUDA the same code runs on the CPU, which is how it is tested.
- ``mixed`` (``mixed:SHARE``): both at once, for when neither alone keeps up with the model: the reader
  threads decode a fixed share of each batch's images on the CPU (image k when floor((k+1) * share) >
  floor(k * share), so which image takes which path depends on its position alone, never on timing) and read
  the others' bytes for the device's decoder; the batch comes out in input order as from the other two.
  ``cpu`` and ``torch`` are its shares 1 and 0. Measured on one H200 with 16 cores (2026-11-30, full-size
  films; docs/benchmarks.md): nvJPEG alone 1,270 images/s, the host's 15 reader threads 325, end to end
  torch 772-957 and mixed:0.3 825-876.

``workers`` threads read at most ``prefetch`` batches ahead of the one being used, so memory is flat in the
number of images. Threads, not DataLoader worker processes: a worker process must start (forkserver or
spawn: a fresh interpreter importing torch, 2.5 s per stream measured on the 2-core machine) or fork a
parent that holds DuckDB, OpenCV and Dagster threads, and it sends every image back through shared
memory; on the H200 machine (2026-11-27, 762 real-size JPEGs) 15 worker processes streamed 13 images/s
where reading in the calling process gave 444. ``workers=0`` reads in the calling thread. No polars, DuckDB
or Dagster here: the out-of-process VQA worker imports this module.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ehrxqa_pipeline.vqa.jpeg import ImageDecodeError, decode_one, host_threads, spans

DECODERS = ("cpu", "torch", "mixed")
SHARES = {"cpu": 1.0, "torch": 0.0}  # the mixed decoder's CPU share that each plain decoder is
MIXED_SHARE = 0.3  # ``mixed`` alone: the best share measured on the one GPU machine tried (see the module doc)


@dataclass
class Batch:
    """Decoded images ``rows`` (positions in the input list) and their model inputs on the device."""
    rows: np.ndarray  # (M,) int64
    crops: torch.Tensor  # (N, c, c) uint8
    crop_image: np.ndarray  # (N,) int64: the crop's image, 0..M-1 within this batch
    thumbs: torch.Tensor  # (M, t, t) uint8
    texture: torch.Tensor  # (M, t, t) uint8
    missing: list[str] = field(default_factory=list)
    decode_seconds: float = 0.0  # the reader threads' seconds (reading, and decoding on the CPU) plus the main
    # process's for the device's share (on CUDA the kernels run asynchronously, so that is the time to issue
    # them; synchronize to time the device)


def resolve_decoder(decode: str, device: str) -> str:
    """``auto`` -> ``torch`` on CUDA (nvJPEG), ``cpu`` elsewhere; ``cpu``, ``torch`` and ``mixed`` are honoured."""
    if decode == "auto":
        return "torch" if str(device).startswith("cuda") else "cpu"
    if decode not in DECODERS:
        raise ValueError(f"unknown JPEG decoder {decode!r}: use auto, cpu, torch or mixed")
    return decode


def parse_decoder(decode: str, device: str) -> tuple[str, float]:
    """(decoder, share of the images decoded on the CPU) of ``auto``, ``cpu``, ``torch``, ``mixed`` or
    ``mixed:SHARE`` (0 <= SHARE <= 1) on ``device``."""
    name, colon, value = decode.partition(":")
    decoder = resolve_decoder(name, device)
    if colon and decoder != "mixed":
        raise ValueError(f"JPEG decoder {decode!r}: only mixed takes a share (mixed:SHARE)")
    try:
        share = SHARES.get(decoder, float(value) if colon else MIXED_SHARE)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"JPEG decoder {decode!r}: the share decoded on the CPU must be between 0 and 1")
    return decoder, share


def reader_threads(device: str) -> int:
    """Default reader threads: on CUDA every core but the one feeding the device (``jpeg.host_threads``: the
    threads are the device's supply of bytes, and the CPU share's decoders); elsewhere 2, beside torch's own."""
    return host_threads() if str(device).startswith("cuda") else 2


def on_cpu(k: int, share: float) -> bool:
    """Whether the mixed decoder decodes image ``k`` (its position in the stream) on the CPU: a share
    ``share`` of the images, spread evenly (share 1: all of them, 0: none)."""
    return math.floor((k + 1) * share) > math.floor(k * share)


class _Images:
    """``read(k)`` = (k, payload, seconds); payload = decode_one's output (thumbnail + texture, crops) for an
    image decoded on the CPU, the file's bytes (a tensor) for one the device decodes; None = missing (or
    undecodable, on the CPU) in ``report`` mode."""

    def __init__(self, paths: Sequence[Path], boxes: Sequence[np.ndarray], cpu_share: float, crop_size: int,
                 thumb_size: int, pad: float, min_side: int, on_missing: str):
        self.paths, self.boxes, self.cpu_share, self.on_missing = list(paths), list(boxes), cpu_share, on_missing
        self.args = (crop_size, thumb_size, pad, min_side)

    def read(self, k: int):
        from ehrxqa_pipeline.vqa.decode import read_jpeg

        t0 = time.perf_counter()
        if on_cpu(k, self.cpu_share):
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

    ``decode``: see ``parse_decoder``. A missing or undecodable JPEG raises ``ImageDecodeError`` naming it, or
    with ``on_missing="report"`` is left out of its batch and listed in ``Batch.missing``.
    """
    if on_missing not in ("raise", "report"):
        raise ValueError(f"on_missing must be 'raise' or 'report', not {on_missing!r}")
    if len(paths) != len(boxes):
        raise ValueError(f"stream: {len(paths)} paths but {len(boxes)} box arrays")
    _, share = parse_decoder(decode, device)
    data = _Images(paths, boxes, share, crop_size, thumb_size, pad, min_side, on_missing)
    for items in _read_ahead(data.read, len(data.paths), max(1, batch_images), workers, max(1, prefetch)):
        yield _assemble(data, items, device)


def _assemble(data: _Images, items: list, device: str) -> Batch:
    """One batch from its reads: the CPU-decoded images stacked, the others decoded and cut on the device,
    all in input order."""
    from ehrxqa_pipeline.vqa.decode import cut, decode_gray

    crop_size, thumb_size, pad, min_side = data.args
    missing = [str(data.paths[k]) for k, out, _ in items if out is None]
    kept = [(k, out, s) for k, out, s in items if out is not None]
    seconds = float(sum(s for _, _, s in kept))
    on_host = [(k, out) for k, out, _ in kept if not isinstance(out, torch.Tensor)]
    raw = [(k, out) for k, out, _ in kept if isinstance(out, torch.Tensor)]
    parts = []  # (rows, crops, thumbs, texture) of each path, on the device
    if on_host:
        thumbs = torch.from_numpy(np.stack([o[0] for _, o in on_host])).to(device)
        parts.append((np.array([k for k, _ in on_host], np.int64),
                      torch.from_numpy(np.concatenate([o[1] for _, o in on_host])).to(device), thumbs[:, 0],
                      thumbs[:, 1]))
    if raw:
        t0 = time.perf_counter()
        decoded = decode_gray([o for _, o in raw], device, [str(data.paths[k]) for k, _ in raw],
                              skip_bad=data.on_missing == "report")
        missing += [str(data.paths[k]) for (k, _), img in zip(raw, decoded) if img is None]
        rows = np.array([k for (k, _), img in zip(raw, decoded) if img is not None], np.int64)
        parts.append((rows, *cut([img for img in decoded if img is not None], [data.boxes[k] for k in rows],
                                 crop_size, thumb_size, pad, min_side)))
        seconds += time.perf_counter() - t0
    parts = [p for p in parts if len(p[0])]
    if not parts:
        empty = torch.zeros((0, thumb_size, thumb_size), dtype=torch.uint8, device=device)
        return Batch(np.zeros(0, np.int64), torch.zeros((0, crop_size, crop_size), dtype=torch.uint8, device=device),
                     np.zeros(0, np.int64), empty, empty.clone(), missing, seconds)
    rows, crops, thumbs, texture = parts[0] if len(parts) == 1 else _in_input_order(data, parts)
    return Batch(rows, crops, data.crop_image(rows), thumbs, texture, missing, seconds)


def _in_input_order(data: _Images, parts: list) -> tuple:
    """The parts' images merged back into input order, each image's crops moving with it."""
    rows = np.concatenate([p[0] for p in parts])
    order = np.argsort(rows, kind="stable")
    counts = np.array([len(data.boxes[k]) for k in rows], np.int64)
    starts = np.cumsum(counts) - counts  # where each image's crops begin in the parts' concatenation
    crop_order = spans(starts[order], counts[order])
    crops, thumbs, texture = (torch.cat([p[i] for p in parts]) for i in (1, 2, 3))
    device = crops.device
    at, crop_at = torch.from_numpy(order).to(device), torch.from_numpy(crop_order).to(device)
    return rows[order], crops[crop_at], thumbs[at], texture[at]
