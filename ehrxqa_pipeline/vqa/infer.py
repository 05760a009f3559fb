"""Batch inference of the reference VQA model into ``Predictions``.

Grain: ``Predictions.relations`` = one row per (image, object with a usable box, pool attribute of that
object) with ``prob`` = sigmoid of the model's logit; ``Predictions.images`` = one row per image with
``p_pa`` (view position PA vs AP) and ``p_male`` from the thumbnail heads, and ``ctr`` / ``mtr`` taken
from ``splits.images``: CTR/MTR from the given boxes (the cardiothoracic / mediastinal-to-thoracic ratios
computed by the splits stage from the Chest ImaGenome boxes, not predicted by the model).
Sources: ``splits.images``, ``ingest.silver_bbox`` and the JPEGs under ``files_root``, the trained model.

With the CPU decoder, images are processed in chunks of ``chunk_images``; while the model scores one chunk,
a background thread decodes the next (decoding itself runs in ``decode_workers`` threads). With the torch
decoder (the default on CUDA) or the mixed one, ``vqa.stream`` feeds batches of ``batch_size`` images: reader
threads read the files ahead (and decode the mixed decoder's CPU share) while nvJPEG decodes and the model
scores on the device.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from ehrxqa_pipeline.vqa.dataset import build_arrays, select_images
from ehrxqa_pipeline.vqa.predictions import IMAGES_SCHEMA, RELATIONS_SCHEMA, Predictions


def _relations(image_ids: pl.Series, obj: np.ndarray, vocab, prob: np.ndarray) -> pl.DataFrame:
    """One row per (crop, pool attribute of its object): crop k is image ``image_ids[k]``, object ``obj[k]``."""
    rows, att = np.nonzero(vocab.pool[obj])
    return pl.DataFrame({
        "image_id": image_ids.gather(rows),
        "object": pl.Series(vocab.objects, dtype=pl.String).gather(obj[rows]),
        "attribute": pl.Series(vocab.attributes, dtype=pl.String).gather(att),
        "prob": prob[rows, att].astype(np.float32),
    }, schema=RELATIONS_SCHEMA)


def predict(model_result, con, files_root: Path, split: str | None = "test", image_ids: list[str] | None = None,
            batch_size: int = 256, device: str = "auto", decode_workers: int | None = None,
            timings: dict | None = None,
            chunk_images: int = 2048, on_missing: str = "raise", threads: int | None = 1,
            decode: str = "auto") -> Predictions:
    """Predictions for the images of ``split`` (or exactly ``image_ids`` when given).

    ``batch_size``: images per forward pass (their ~36 crops each, plus thumbnails). ``timings`` (a dict)
    is filled with wall / decode / model seconds, images and images/s, and how the JPEGs were decoded (the decoder,
    its CPU share, the threads). ``on_missing``: see vqa.images.
    The model is moved to ``device`` (in place) and put in eval mode. ``threads``: torch CPU threads for the
    forward passes (see ``TrainConfig.threads``). ``decode``: ``cpu`` (PIL + OpenCV in threads, chunk by chunk),
    ``torch`` (``vqa.stream``: reader threads read the files, nvJPEG decodes and crops on the device),
    ``mixed`` / ``mixed:SHARE`` (``vqa.stream``: both, a share on the CPU) or ``auto`` (torch on CUDA, cpu
    elsewhere). ``decode_workers``: the threads that decode (cpu) or read (torch, mixed); None:
    ``vqa.stream.reader_threads`` (every core but one on CUDA, else 2).
    """
    from ehrxqa_pipeline.vqa.device import torch_threads

    with torch_threads(threads):
        return _predict(model_result, con, files_root, split, image_ids, batch_size, device, decode_workers,
                        timings, chunk_images, on_missing, decode)


def _predict(model_result, con, files_root, split, image_ids, batch_size, device, decode_workers, timings,
             chunk_images, on_missing, decode) -> Predictions:
    from ehrxqa_pipeline.vqa.device import resolve_device
    from ehrxqa_pipeline.vqa.stream import parse_decoder, reader_threads

    t_start = time.perf_counter()
    dev = resolve_device(device)
    amp = bool(getattr(model_result.config, "amp", False)) and dev.startswith("cuda")
    vocab, model = model_result.vocab, model_result.model.to(dev).eval()
    cfg = model_result.config
    if image_ids is None and not split:
        raise ValueError("predict: give a split or image_ids")
    images = select_images(con, split, image_ids=image_ids)
    if image_ids is not None and images.height != len(set(image_ids)):
        raise ValueError(f"predict: {len(set(image_ids)) - images.height} of {len(set(image_ids))} image_ids are "
                         f"not in splits.images")
    if decode_workers is None:
        decode_workers = reader_threads(dev)
    decoder, share = parse_decoder(decode, dev)
    if decoder != "cpu":
        parts = _predict_streamed(model, vocab, con, images, files_root, dev, amp, batch_size, decode_workers,
                                  on_missing, cfg, decode)
    else:
        parts = _predict_chunked(model, vocab, con, images, files_root, dev, amp, batch_size, decode_workers,
                                 on_missing, cfg, chunk_images)
    rel_parts, img_parts, missing, decode_s, model_s = parts
    ratios = con.execute("SELECT image_id, ctr::DOUBLE AS ctr, mtr::DOUBLE AS mtr FROM splits.images").pl()
    imgs = (pl.concat(img_parts) if img_parts else pl.DataFrame(schema={k: IMAGES_SCHEMA[k] for k in
                                                                        ("image_id", "p_pa", "p_male")}))
    imgs = imgs.join(ratios, on="image_id", how="left").select(list(IMAGES_SCHEMA)).sort("image_id")
    rels = (pl.concat(rel_parts) if rel_parts else pl.DataFrame(schema=RELATIONS_SCHEMA)).sort(
        "image_id", "object", "attribute")
    n = imgs.height
    if timings is not None:
        wall = time.perf_counter() - t_start
        timings.update({"wall_seconds": wall, "decode_seconds": decode_s, "model_seconds": model_s, "images": n,
                        "images_per_s": n / max(wall, 1e-9), "model_images_per_s": n / max(model_s, 1e-9),
                        "decode_images_per_s": n / max(decode_s, 1e-9), "missing": missing, "device": dev,
                        "batch_size": batch_size, "decoder": decoder, "cpu_share": share,
                        "decode_workers": decode_workers})
    return Predictions(rels, imgs)


def _predict_streamed(model, vocab, con, images: pl.DataFrame, files_root: Path, dev: str, amp: bool,
                      batch_size: int, workers: int, on_missing: str, cfg, decode: str):
    """Relation and image parts of ``images`` through ``vqa.stream`` with the torch or mixed decoder (see
    predict)."""
    import torch

    from ehrxqa_pipeline.vqa.images import box_table
    from ehrxqa_pipeline.vqa.model import predict_tensors
    from ehrxqa_pipeline.vqa.stream import stream

    ids = images["image_id"].to_list()
    boxes, first, counts, coords, geom = box_table(con, ids, list(vocab.objects))
    obj = boxes["object"].replace_strict(list(vocab.objects), range(len(vocab.objects)),
                                         return_dtype=pl.Int64).to_numpy()
    root = Path(files_root)
    paths = [root / p for p in images["image_path"]]
    per_image = [coords[f:f + c] for f, c in zip(first, counts)]
    rel_parts, img_parts, missing, decode_s, model_s = [], [], [], 0.0, 0.0
    geom_t, obj_t = torch.from_numpy(geom).to(dev), torch.from_numpy(np.array(obj, np.int64)).to(dev)
    for batch in stream(paths, per_image, dev, decode, batch_size, workers, crop_size=cfg.crop_size,
                        thumb_size=cfg.thumb_size, on_missing=on_missing):
        decode_s += batch.decode_seconds
        missing += batch.missing
        t0 = time.perf_counter()
        rows = np.concatenate([np.arange(first[k], first[k] + counts[k]) for k in batch.rows] or
                              [np.zeros(0, np.int64)]).astype(np.int64)
        at = torch.from_numpy(rows).to(dev)
        prob, img = predict_tensors(model, batch.crops, torch.from_numpy(batch.crop_image).to(dev), obj_t[at],
                                    geom_t[at], batch.thumbs, batch.texture, amp)
        prob, img = prob.cpu().numpy(), img.cpu().numpy()
        model_s += time.perf_counter() - t0
        rel_parts.append(_relations(boxes["image_id"].gather(rows), obj[rows], vocab, prob))
        img_parts.append(pl.DataFrame({"image_id": [ids[k] for k in batch.rows], "p_pa": img[:, 0],
                                       "p_male": img[:, 1]},
                                      schema={k: IMAGES_SCHEMA[k] for k in ("image_id", "p_pa", "p_male")}))
    return rel_parts, img_parts, missing, decode_s, model_s


def _predict_chunked(model, vocab, con, images: pl.DataFrame, files_root: Path, dev: str, amp: bool,
                     batch_size: int, decode_workers: int, on_missing: str, cfg, chunk_images: int):
    """Relation and image parts of ``images``, ``chunk_images`` at a time: while the model scores one chunk, a
    background thread decodes the next on the CPU (``vqa.images``, itself ``decode_workers`` threads)."""
    import torch

    from ehrxqa_pipeline.vqa.model import image_stats, predict_arrays

    chunks = [images.slice(s, chunk_images) for s in range(0, images.height, max(1, chunk_images))]

    def decode(chunk: pl.DataFrame):
        with con.cursor() as cur:  # own cursor: runs in the prefetch thread
            return build_arrays(cur, chunk, files_root, vocab, None, cfg.crop_size, cfg.thumb_size,
                                decode_workers, on_missing)

    rel_parts, img_parts, missing = [], [], []
    decode_s = model_s = 0.0
    n_obj = max(1, len(vocab.objects))
    with ThreadPoolExecutor(1) as prefetch:
        pending = prefetch.submit(decode, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            arrays = pending.result()
            pending = prefetch.submit(decode, chunks[k + 1]) if k + 1 < len(chunks) else None
            decode_s += arrays.crops.decode_seconds
            missing += arrays.crops.missing
            t0 = time.perf_counter()
            ts = image_stats(arrays.crops.thumbs)
            prob, img = predict_arrays(model, arrays.crops.crops, ts[arrays.crops.index["image_row"].to_numpy()],
                                       arrays.obj, arrays.crops.geom, arrays.crops.thumbs, arrays.crops.texture,
                                       ts, dev, amp,
                                       crop_batch=batch_size * n_obj, image_batch=batch_size)
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            model_s += time.perf_counter() - t0
            rel_parts.append(_relations(arrays.crops.index["image_id"], arrays.obj, vocab, prob))
            img_parts.append(pl.DataFrame({"image_id": arrays.crops.image_ids, "p_pa": img[:, 0],
                                           "p_male": img[:, 1]}, schema={k: IMAGES_SCHEMA[k] for k in
                                                                         ("image_id", "p_pa", "p_male")}))
    return rel_parts, img_parts, missing, decode_s, model_s
