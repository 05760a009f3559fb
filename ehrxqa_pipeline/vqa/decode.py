"""Decode chest X-ray JPEGs and cut crops and thumbnails with torch: nvJPEG and the GPU when there is one.

Grain: a batch of images (JPEG bytes + the usable boxes of each, JPEG pixels) -> one crop per box, one
thumbnail and one texture map per image, as uint8 tensors on the device, in input order.
Source: JPEG bytes (read by ``read_jpeg``, in the reader threads of ``vqa.stream``); boxes from ``ingest.silver_bbox``.

The same code runs on the CPU (torchvision's libjpeg decoder), which is how it is tested without a GPU. It
reproduces ``vqa.jpeg.decode_one``, the CPU path the build uses by default: the image is reduced by the
power of two PIL's draft mode would pick (``jpeg.draft_scale``; here block averaging of the full decode, where
libjpeg scales in the DCT), boxes are scaled, padded and clipped by the same ``jpeg.crop_bounds``, and the
area resizing is ``roi_align`` with one sample per source pixel (bilinear where a crop is upsampled, as
OpenCV's INTER_LINEAR). The texture map is |image - Gaussian(sigma 1 px, 9 taps, reflected border)|, as
OpenCV's, computed for the whole batch at once. Pixels differ from the CPU path by a few grey levels (DCT vs
block reduction, sampling vs exact area weights); ``tests/vqa/test_decode.py`` bounds the difference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ehrxqa_pipeline.vqa.jpeg import ImageDecodeError, crop_bounds, draft_scale


def read_jpeg(path: Path) -> torch.Tensor:
    """The file's bytes as a 1-D uint8 tensor (what ``decode_jpeg`` takes); ImageDecodeError if missing."""
    try:
        return torch.from_numpy(np.fromfile(path, np.uint8))
    except (FileNotFoundError, IsADirectoryError) as exc:
        raise ImageDecodeError(f"JPEG not found: {path}") from exc


def decode_gray(datas: list[torch.Tensor], device: str, names: list[str] | None = None,
                skip_bad: bool = False) -> list[torch.Tensor | None]:
    """(1, H, W) uint8 grayscale images on ``device``, one per JPEG byte string (batched on CUDA).

    A batch that fails is decoded one by one, so the error names the file (``names[k]``); with ``skip_bad``
    an undecodable file gives None in its place instead.
    """
    from torchvision.io import ImageReadMode, decode_jpeg

    if not datas:
        return []
    try:
        return list(decode_jpeg(datas, mode=ImageReadMode.GRAY, device=device))
    except RuntimeError:
        if len(datas) == 1:
            if skip_bad:
                return [None]
            name = names[0] if names else "image 0"
            raise ImageDecodeError(f"cannot decode JPEG {name}") from None
    return [decode_gray([d], device, [names[k] if names else f"image {k}"], skip_bad)[0]
            for k, d in enumerate(datas)]


def _gaussian_9(device) -> torch.Tensor:
    x = torch.arange(9, dtype=torch.float64) - 4
    k = torch.exp(-x * x / 2)
    return (k / k.sum()).to(torch.float32).to(device)


def _separable(x: torch.Tensor, kernel: torch.Tensor, dim: int) -> torch.Tensor:
    """Valid 1-D correlation of ``x`` with ``kernel`` along ``dim``, as a weighted sum of shifted slices:
    elementwise kernels only (a 1-channel convolution is a slow path of oneDNN and, per shape, of cuDNN)."""
    n = x.shape[dim] - len(kernel) + 1
    out = x.narrow(dim, 0, n) * kernel[0]
    for i in range(1, len(kernel)):
        out.add_(x.narrow(dim, i, n), alpha=float(kernel[i]))
    return out


def _reduce(img: torch.Tensor, min_side: int) -> tuple[torch.Tensor, float, float]:
    """(1, h, w) float image at the draft scale, and its x / y scale factors against the JPEG."""
    _, h, w = img.shape
    f = draft_scale(w, h, min_side)
    x = img.to(torch.float32)
    if f > 1:
        x = F.avg_pool2d(x[None], f, ceil_mode=True)[0]
    return x, x.shape[2] / w, x.shape[1] / h


def _u8(x: torch.Tensor) -> torch.Tensor:
    return x.round().clamp_(0, 255).to(torch.uint8)


def cut(images: list[torch.Tensor], boxes: list[np.ndarray], crop_size: int = 32, thumb_size: int = 64,
        pad: float = 0.05, min_side: int = 512) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Crops (sum k_i, c, c), thumbnails (M, t, t) and texture (M, t, t), uint8 on the images' device.

    ``images``: (1, H, W) uint8 tensors from ``decode_gray``; ``boxes[i]``: (k_i, 4) JPEG-pixel boxes of image i
    (crops come out image by image, in box order).
    """
    from torchvision.ops import roi_align

    if not images:
        empty = torch.zeros((0, thumb_size, thumb_size), dtype=torch.uint8)
        return torch.zeros((0, crop_size, crop_size), dtype=torch.uint8), empty, empty.clone()
    device = images[0].device
    reduced, bounds = [], []
    for img, b in zip(images, boxes):
        x, sx, sy = _reduce(img, min_side)
        reduced.append(x)
        bounds.append(crop_bounds(b, sx, sy, pad, x.shape[2], x.shape[1]))
    sizes = [(x.shape[2], x.shape[1]) for x in reduced]
    # one batch shape, rounded up to 32 px so that the convolutions see few distinct shapes (cuDNN plans)
    hq, wq = (-(-max(v) // 32) * 32 for v in ((h for _, h in sizes), (w for w, _ in sizes)))
    # edge-replicated beyond each image, so roi_align's samples at an edge see the edge pixel, not another's
    imgs = torch.stack([F.pad(x[None], (0, wq - x.shape[2], 0, hq - x.shape[1]), mode="replicate")[0]
                        for x in reduced])
    # the texture's blur reflects at each image's own border (as OpenCV's), then runs once on the batch
    kernel = _gaussian_9(device)
    padded = torch.stack([F.pad(F.pad(x[None], (4,) * 4, mode="reflect" if min(x.shape[1:]) > 4 else "replicate"),
                                (0, wq - x.shape[2], 0, hq - x.shape[1]), mode="replicate")[0] for x in reduced])
    blur = _separable(_separable(padded, kernel, 3), kernel, 2)
    texs = (imgs - blur).abs_()
    whole = torch.tensor([[i, 0, 0, w, h] for i, (w, h) in enumerate(sizes)], dtype=torch.float32, device=device)
    n = max(1, -(-max(max(h, w) for w, h in sizes) // thumb_size))
    thumbs = _u8(roi_align(imgs, whole, thumb_size, 1.0, n, aligned=True)[:, 0])
    texture = (roi_align(texs, whole, thumb_size, 1.0, n, aligned=True)[:, 0] * 8.0 + 0.5).floor_().clamp_(0, 255)
    rows = np.concatenate([np.c_[np.full(len(b), i), b] for i, b in enumerate(bounds)]).astype(np.float32)
    if len(rows) == 0:
        return torch.zeros((0, crop_size, crop_size), dtype=torch.uint8, device=device), thumbs, texture.to(
            torch.uint8)
    roi = torch.from_numpy(rows).to(device)
    crops = roi_align(imgs, roi, crop_size, 1.0, -1, aligned=True)[:, 0]
    empty = torch.from_numpy((rows[:, 3] - rows[:, 1] < 1) | (rows[:, 4] - rows[:, 2] < 1)).to(device)
    crops = _u8(crops).masked_fill_(empty[:, None, None], 0)
    return crops, thumbs, texture.to(torch.uint8)
