"""Throughput of the reference model: training and inference images/s per batch size, decode vs model time.

Grain: one dict per run: ``decode`` (one pass over the sampled train images), and per batch size one
``train`` and one ``infer`` entry. Source: ``splits.images`` (train split, a fixed hash-ordered sample of
``max_images``), ``cxr_labels.silver``, ``ingest.silver_bbox``, the JPEGs under ``files_root``.
Used by ``make bench``; runs unchanged on a GPU machine, where it also reports peak GPU memory and, when
the NVML bindings are installed, GPU utilisation (``torch.cuda.utilization``).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ehrxqa_pipeline.vqa.dataset import build_arrays, load_vocab, prevalence, select_images


def _gpu(device: str) -> dict:
    import torch

    if not device.startswith("cuda"):
        return {}
    out = {"gpu_max_memory_allocated_mib": round(torch.cuda.max_memory_allocated(device) / 2 ** 20, 1)}
    try:
        out["gpu_utilization_pct"] = torch.cuda.utilization(device)
    except Exception as exc:  # pynvml missing or NVML unavailable: memory is still reported
        out["gpu_utilization_pct"] = None
        out["gpu_utilization_error"] = type(exc).__name__
    return out


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def throughput(con, files_root: Path, batch_sizes=(32, 64, 128, 256), device: str = "auto",
               max_images: int | None = 512, crop_size: int = 32, thumb_size: int = 64, decode_workers: int = 2,
               min_steps: int = 5, threads: int | None = 1, amp: bool = True, seed: int = 0) -> dict:
    """Measure training and inference images/s per batch size on the same decoded images.

    Training: ``min_steps`` timed optimisation steps after one warm-up step (an image = its ~36 object crops
    plus its thumbnail). Inference: one timed pass over all sampled images after a warm-up batch.
    """
    import torch

    from ehrxqa_pipeline.vqa.device import device_info, resolve_device, seed_everything, torch_threads
    from ehrxqa_pipeline.vqa.model import build_model, predict_arrays
    from ehrxqa_pipeline.vqa.steps import StepData, array_stats, train_step

    with torch_threads(threads):
        dev = resolve_device(device)
        use_amp = amp and dev.startswith("cuda")
        seed_everything(seed, dev)
        vocab = load_vocab(con)
        images = select_images(con, "train", max_images=max_images)
        arrays = build_arrays(con, images, files_root, vocab, "silver", crop_size, thumb_size, decode_workers)
        n = arrays.n_images
        if n == 0:
            raise ValueError("throughput: no train images to measure")
        out: dict = {**device_info(dev), "images": n, "crops": len(arrays.obj), "crop_size": crop_size,
                     "decode": {"seconds": arrays.crops.decode_seconds, "workers": decode_workers,
                                "images_per_s": n / max(arrays.crops.decode_seconds, 1e-9)},
                     "train": {}, "infer": {}}
        data = StepData.of(arrays, vocab, dev, use_amp)
        crops_per_image = len(arrays.obj) / n
        rng = np.random.default_rng(seed)
        for bs in batch_sizes:
            model = build_model(len(vocab.objects), len(vocab.attributes)).to(dev)
            model.set_prior(prevalence(arrays, vocab))
            model.to(dev).train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            if dev.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats(dev)
            k = max(1, int(round(bs * crops_per_image)))
            batches = [(np.sort(rng.choice(len(arrays.obj), min(k, len(arrays.obj)), replace=False)),
                        np.sort(rng.choice(n, min(bs, n), replace=False))) for _ in range(min_steps + 1)]
            train_step(model, opt, data, *batches[0])
            _sync(dev)
            t0 = time.perf_counter()
            for ci, ii in batches[1:]:
                train_step(model, opt, data, ci, ii)
            _sync(dev)
            dt = time.perf_counter() - t0
            out["train"][bs] = {"seconds": dt, "steps": min_steps, "images_per_s": min_steps * min(bs, n) / dt,
                                "crops_per_s": sum(len(c) for c, _ in batches[1:]) / dt, **_gpu(dev)}
            cs, ts = array_stats(arrays)
            args = (cs, arrays.obj, arrays.crops.geom, arrays.crops.thumbs, arrays.crops.texture, ts, dev, use_amp)
            crop_batch = max(1, int(round(bs * crops_per_image)))
            predict_arrays(model, arrays.crops.crops[:crop_batch], args[0][:crop_batch], args[1][:crop_batch],
                           args[2][:crop_batch], args[3][:bs], args[4][:bs], args[5][:bs], dev, use_amp)
            _sync(dev)
            t0 = time.perf_counter()
            predict_arrays(model, arrays.crops.crops, *args, crop_batch=crop_batch, image_batch=bs)
            _sync(dev)
            dt = time.perf_counter() - t0
            out["infer"][bs] = {"seconds": dt, "images_per_s": n / dt, **_gpu(dev)}
        return out
